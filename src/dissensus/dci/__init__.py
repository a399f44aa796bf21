"""dissensus.dci"""
