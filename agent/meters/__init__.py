"""opptune.agent.meters"""
