"""The data stages as DVC runs them (:mod:`.stages`), the profiles DVC prepares (:mod:`.dvc_profiles`) and
the hub mirror for compute nodes without network (:mod:`.mirror`, filled by :mod:`.mirror_fill`)."""
