"""`opptune report`: a static HTML page with PNG figures of what the daemon measured, fitted
and recommended (analysis: the numbers; plots: the figures; page: the HTML; build: the files;
cli: the command)."""
