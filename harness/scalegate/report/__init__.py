"""What people read: the terminal table, ``compare``, plots, TensorBoard scalars, the alpha-beta projection."""
