"""kref.controller"""
