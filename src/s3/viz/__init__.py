"""s3.viz"""
