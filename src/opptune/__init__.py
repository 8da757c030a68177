"""opptune: find the operating point (cores, CPU frequency) of parallel software on real boards."""

# The one place of the version: the package metadata reads it at build time (pyproject.toml),
# the agent sends it in its hello, the daemon records its own in the store's fleet rows.
# Bump it with every change a fleet can tell apart (README, "Versions").
__version__ = "0.8.0"
