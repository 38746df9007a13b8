"""kref.protocol"""
