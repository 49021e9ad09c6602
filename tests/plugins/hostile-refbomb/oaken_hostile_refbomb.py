"""Describes an output whose schema, small as sent, multiplies when Oaken resolves its references: each of
LEVELS definitions holds WIDTH fields of the next one: WIDTH ** LEVELS leaves from a kilobyte and a half on the
pipe (4 ** 7 here, seconds of Oaken's time; 6 ** 7 takes minutes)."""

from __future__ import annotations

from typing import Any

from oaken_plugin import Closed, Plugin, Service

WIDTH, LEVELS = 4, 7


class Bomb(Plugin):
    def describe(self) -> dict[str, Any]:
        described = super().describe()
        fields = [f"f{i}" for i in range(WIDTH)]
        defs: dict[str, Any] = {
            f"L{level}": {
                "type": "object",
                "additionalProperties": False,
                "properties": {name: {"$ref": f"#/$defs/L{level + 1}"} for name in fields},
            }
            for level in range(LEVELS)
        }
        defs[f"L{LEVELS}"] = {"type": "string"}
        described["operations"][0]["output_schema"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {"top": {"$ref": "#/$defs/L0"}},
            "$defs": defs,
        }
        return described


plugin = Bomb(name="refbomb", version="0.1")


class Empty(Closed):
    pass


@plugin.operation(name="boom", summary="Never called.", input=Empty, output=Empty)
def boom(service: Service, data: Empty) -> Empty:
    return Empty()
