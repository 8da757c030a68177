"""opptune.agent.knobs"""
