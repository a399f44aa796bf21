"""dissensus.concord"""
