"""leanlm.reporting"""
