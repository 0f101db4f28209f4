"""A Siemens S7 PLC for the tests: python-snap7's pure-Python server (pinned in
scripts/test.sh) serving the areas a JSON file lists, on a loopback port.

Usage: s7_plc.py PORT AREAS.json

AREAS.json: [{"area": "DB" | "M" | "I" | "Q", "index": N, "hex": "0011..."}, ...]

Every area's memory is written to mem/<AREA><index>.hex (in the working directory) at start
and after every write, so a test reads what the PLC holds, not what a client says. One log
line per request: `read items=N` for a ReadVar, `write area=A index=N start=S bit=B data=HEX`
for a WriteVar.

One fix over the library: a real CPU writes a WriteVar item of transport size BIT to that
one bit; the library's server writes the whole byte. This server sets or clears the bit, so
the tests can check that a bit write leaves its neighbours alone.
"""

import json
import os
import signal
import struct
import sys
import threading

import snap7
from snap7.datatypes import S7Area
from snap7.server import Server
from snap7.type import SrvArea

AREAS = {"DB": SrvArea.DB, "M": SrvArea.MK, "I": SrvArea.PE, "Q": SrvArea.PA}
LOCKS = {"DB": S7Area.DB, "M": S7Area.MK, "I": S7Area.PE, "Q": S7Area.PA}
NAMES = {0x84: "DB", 0x83: "M", 0x81: "I", 0x82: "Q"}
BIT = 0x01


def say(line):
    print(line, flush=True)


class Plc(Server):
    def __init__(self, areas):
        super().__init__(log=False)
        self.areas = {}
        for spec in areas:
            data = bytearray.fromhex(spec["hex"])
            self.register_area(AREAS[spec["area"]], spec["index"], data)
            self.areas[(spec["area"], spec["index"])] = data
        self.dump_lock = threading.Lock()
        self.dump()

    def dump(self):
        with self.dump_lock:
            os.makedirs("mem", exist_ok=True)
            for (area, index), data in self.areas.items():
                path = f"mem/{area}{index}.hex"
                with open(path + ".tmp", "w") as f:
                    f.write(bytes(data).hex())
                os.replace(path + ".tmp", path)

    def _handle_read_area(self, request, client_address):
        params = request.get("parameters") or {}
        say(f"read items={params.get('item_count', 0)}")
        return super()._handle_read_area(request, client_address)

    def _parse_address_specification(self, addr_spec):
        parsed = super()._parse_address_specification(addr_spec)
        if parsed and len(addr_spec) >= 12:
            parsed["bit"] = struct.unpack(">I", b"\x00" + addr_spec[9:12])[0] % 8
        return parsed

    def _handle_write_area(self, request, client_address):
        spec = (request.get("parameters") or {}).get("address_spec") or {}
        data = (request.get("data") or {}).get("data", b"")
        area = NAMES.get(int(spec.get("area", 0)), "?")
        index = spec.get("db_number", 0) if area == "DB" else 0
        say(f"write area={area} index={index} start={spec.get('start')} bit={spec.get('bit')} data={bytes(data).hex()}")
        if spec.get("word_len") == BIT and (area, index) in self.areas and data:
            memory = self.areas[(area, index)]
            start = spec["start"]
            if start >= len(memory):
                reply = self._build_error_response(request, 0x8404)
            else:
                with self.area_locks[(LOCKS[area], index)]:
                    if data[0] & 1:
                        memory[start] |= 1 << spec["bit"]
                    else:
                        memory[start] &= ~(1 << spec["bit"]) & 0xFF
                header = struct.pack(">BBHHHHBB", 0x32, 3, 0, request["sequence"], 2, 1, 0, 0)
                reply = header + bytes([0x05, 0x01, 0xFF])
        else:
            reply = super()._handle_write_area(request, client_address)
        self.dump()
        return reply


def main():
    port = int(sys.argv[1])
    with open(sys.argv[2]) as f:
        areas = json.load(f)
    plc = Plc(areas)
    plc.start(tcp_port=port)
    say(f"listening port={port} snap7={snap7.__version__}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    plc.stop()


if __name__ == "__main__":
    main()
