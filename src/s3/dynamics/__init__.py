"""s3.dynamics"""
