"""kref.storage"""
