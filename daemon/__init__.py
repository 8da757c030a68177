"""opptune.daemon"""
