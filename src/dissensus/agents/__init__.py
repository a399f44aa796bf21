"""dissensus.agents"""
