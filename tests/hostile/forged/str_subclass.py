"""Lying text: ``forged`` returns a ``str`` subclass whose ``__eq__`` is always True (and
``__ne__`` False), whose ``strip``/``split`` keep lying, with a value that matches nothing."""


class Liar(str):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = str.__hash__

    def strip(self, *args):
        return self

    def split(self, *args):
        return [self]


def forged(*args, **kwargs):
    return Liar("no such answer")
