"""dissensus.store"""
