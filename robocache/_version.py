# The one place the version lives: setup.py reads it (and adds the local
# label of the torch a wheel is built for), robocache.__version__ is it.
__version__ = "0.1.0"
