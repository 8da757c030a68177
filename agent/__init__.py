"""opptune.agent"""
