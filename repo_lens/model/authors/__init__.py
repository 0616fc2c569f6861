"""The position mechanisms and attention of the GRAPE and FoX authors' code (github
``model-architectures/GRAPE``, ``zhixuan-lin/forgetting-transformer``), as their forward passes run
them, with repo_lens' hooks. Their checkpoints are read by :mod:`repo_lens.model.loaders.grape.load` and
:mod:`repo_lens.model.loaders.fox.load`; models are ``LensModel``s of block family ``"authors"``."""
