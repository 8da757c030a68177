"""opptune: find the operating point (cores, CPU frequency) of parallel software on real boards."""

__version__ = "0.1.0"
