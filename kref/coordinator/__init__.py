"""kref.coordinator"""
