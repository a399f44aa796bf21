"""dissensus.llm"""
