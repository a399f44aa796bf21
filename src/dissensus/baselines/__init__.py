"""dissensus.baselines"""
