"""kref.records"""
