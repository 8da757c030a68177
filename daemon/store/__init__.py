"""opptune.daemon.store"""
