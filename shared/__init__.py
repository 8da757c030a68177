"""opptune.shared"""
