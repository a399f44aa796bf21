"""dissensus.states"""
