"""s3.tracks"""
