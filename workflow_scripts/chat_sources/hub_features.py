"""The columns a hub source's rows are declared with when ``datasets`` loads them (paper scale).

GLM-5.1-Reasoning-1M-Cleaned's subsets are JSON Lines files. Without declared features,
``datasets``' JSON loader fixes the schema from the first chunk (10 MB) of a file and stops at
the first later row that does not fit it: a ``meta`` key first seen past that point in the
19.6 GB ``main`` file ends the download partway. Declaring the six columns makes every chunk
cast to one schema, a row lacking a column gets a null there, and ``meta`` is kept as JSON text
whatever shape it has (object, string or absent), since nothing downstream reads it.
OpenR1-Math-220k ships parquet files, whose schema is stored with them: nothing to declare.
"""

from __future__ import annotations

from typing import Any

#: The ShareGPT turns of GLM-5.1-Reasoning-1M-Cleaned: ``[{from: human|gpt, value}]``.
GLM_TURN_FIELDS = ("from", "value")


def hub_features(fmt: str) -> Any:
    """The ``datasets.Features`` a download of format ``fmt`` declares, or None to keep the files' own.

    ``id`` is read as text (an integer id would be cast, and the readers take either); the turns
    as a list of ``{from, value}`` strings, as ``chat_sources.readers`` expects them.
    """
    if fmt != "glm_sharegpt":
        return None
    from datasets import Features, Json, List, Value

    text = Value("string")
    return Features(
        {
            "id": text,
            "conversations": List({name: text for name in GLM_TURN_FIELDS}),
            "input": text,
            "output": text,
            "domain": text,
            "meta": Json(),
        }
    )
