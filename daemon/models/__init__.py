"""opptune.daemon.models"""
