"""dissensus.guard"""
