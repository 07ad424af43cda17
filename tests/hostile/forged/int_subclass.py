"""Lying number: ``forged`` returns an ``int`` subclass whose ``__eq__`` is always True (and
``__ne__`` False), with a value that matches nothing."""


class Liar(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


def forged(*args, **kwargs):
    return Liar(-987654321)
