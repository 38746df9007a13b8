"""kref.trace"""
