"""kref.spark"""
