"""leanlm.evaluation"""
