"""kref.broker"""
