"""A Modbus device for the tests, served by pymodbus (pinned in scripts/test.sh).

Usage:
  modbus_device.py tcp PORT           Modbus TCP on 127.0.0.1:PORT, unit 1, and unit 2 with
                                      the sparse map below
  modbus_device.py rtu SERIAL_PATH    Modbus RTU on a serial device (a socat pty), unit 1 only;
                                      requests to other units get no answer at all

The register map is written out below with struct, independently of the connector's
decoder; tests/modbus.rs checks the decoded values against the same numbers.
Holding registers 0..99 exist (100 and up draw exception 2, illegal data address).

For the command tests (tests/modbus_commands.rs), the device also keeps count of the writes
it sees and has a few registers that misbehave on purpose:

  34..59    free for writes (0 at start)
  60        a write here is stored, then answered only after SLOW_SECONDS
  62        a read that covers it is answered only after SLOW_SECONDS
  64..66    each register keeps at most 100 of what is written to it
  68        how long (ms) the device waits before answering each write request, after
            storing its values (0 at start; a write to 68 itself sets it and is not delayed)
  70        write requests seen (FC 5, 6, 15, 16), every address
  71        write requests seen that covered 60
  72        reads started that covered 62
  73..76    write requests seen per function code: 5, 6, 15, 16
  80..89    the first address of the last ten write requests, oldest first
  coils 8..15 free for writes

Unit 2 (TCP only) has a sparse map: holding registers 0-9, 100-103, 1000 and 5000-5009
exist, every other address draws exception 2; its other tables are empty.

Every request is logged as `request unit=U function=F` (stdout, the device's log), so a
test can check which function codes a client sent; every write of unit 1 also as
`write address=A count=N at_ms=T` (Unix ms when its values were stored), so a test can
check when a write took effect.
"""

import asyncio
import logging
import struct
import sys
import time

from pymodbus.datastore import (
    ModbusSequentialDataBlock,
    ModbusSparseDataBlock,
    ModbusServerContext,
    ModbusSlaveContext,
)
from pymodbus.server import StartAsyncSerialServer, StartAsyncTcpServer


def words(fmt, value, word_order="big"):
    """Registers of value packed big-endian; little word order reverses the registers."""
    raw = struct.pack(">" + fmt, value)
    regs = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    return regs if word_order == "big" else regs[::-1]


def holding():
    hr = [0] * 100
    def put(addr, regs):
        hr[addr : addr + len(regs)] = regs
    put(0, words("H", 1234))
    put(1, words("h", -1234))
    put(2, words("I", 305419896))
    put(4, words("i", -123456))
    put(6, words("f", 21.5))
    put(8, words("f", 21.5, "little"))
    put(10, words("Q", 0x0102030405060708))
    put(14, words("q", -5, "little"))
    put(18, words("d", -1234.5))
    put(22, words("d", 3.25, "little"))
    name = b"PUMP-7\x00\x00"
    put(26, [int.from_bytes(name[i : i + 2], "big") for i in range(0, 8, 2)])
    put(30, words("H", 500))
    put(31, words("H", 1))
    put(32, words("I", 70000, "little"))
    put(99, words("H", 99))
    return hr


SLOW_SECONDS = 1.5
SLOW_WRITE = 60
SLOW_READ = 62
CLAMPED = range(64, 67)
ANSWER_DELAY = 68
WRITES, SLOW_WRITES, SLOW_READS = 70, 71, 72
PER_FUNCTION = {5: 73, 6: 74, 15: 75, 16: 76}
WRITE_LOG = 80


class Device(ModbusSlaveContext):
    """A unit that counts the writes it sees and misbehaves at the addresses above."""

    def bump(self, addr):
        hr = self.store["h"]
        hr.setValues(addr, [(hr.getValues(addr, 1)[0] + 1) % 65536])

    async def async_setValues(self, fc_as_hex, address, values):
        covers = lambda a: address <= a < address + len(values)
        if fc_as_hex in (6, 16):
            values = [
                min(v, 100) if address + i in CLAMPED else v for i, v in enumerate(values)
            ]
        self.setValues(fc_as_hex, address, values)
        if fc_as_hex in PER_FUNCTION:
            print(f"write address={address} count={len(values)} at_ms={int(time.time() * 1000)}", flush=True)
            hr = self.store["h"]
            self.bump(WRITES)
            self.bump(PER_FUNCTION[fc_as_hex])
            log = hr.getValues(WRITE_LOG, 10)
            hr.setValues(WRITE_LOG, log[1:] + [address])
            if fc_as_hex in (6, 16) and covers(SLOW_WRITE):
                self.bump(SLOW_WRITES)
                await asyncio.sleep(SLOW_SECONDS)
            delay_ms = hr.getValues(ANSWER_DELAY, 1)[0]
            if delay_ms and not covers(ANSWER_DELAY):
                await asyncio.sleep(delay_ms / 1000)

    async def async_getValues(self, fc_as_hex, address, count=1):
        if fc_as_hex == 3 and address <= SLOW_READ < address + count:
            self.bump(SLOW_READS)
            await asyncio.sleep(SLOW_SECONDS)
        return self.getValues(fc_as_hex, address, count)


def sparse_unit():
    """Unit 2: holding registers in four separate stretches."""
    hr = {0: list(range(10)), 100: [100, 101, 102, 103], 1000: [1000], 5000: [5000 + i for i in range(10)]}
    return ModbusSlaveContext(
        hr=ModbusSparseDataBlock(hr),
        ir=ModbusSparseDataBlock({}),
        co=ModbusSparseDataBlock({}),
        di=ModbusSparseDataBlock({}),
        zero_mode=True,
    )


def trace(request, *addr):
    print(f"request unit={request.slave_id} function={request.function_code}", flush=True)


def context(sparse):
    coils = [False] * 16
    coils[0] = True
    coils[5] = True
    discrete = [False] * 16
    discrete[3] = True
    inputs = [0] * 16
    inputs[0] = 4321
    unit = Device(
        hr=ModbusSequentialDataBlock(0, holding()),
        ir=ModbusSequentialDataBlock(0, inputs),
        co=ModbusSequentialDataBlock(0, coils),
        di=ModbusSequentialDataBlock(0, discrete),
        zero_mode=True,
    )
    units = {1: unit, 2: sparse_unit()} if sparse else {1: unit}
    return ModbusServerContext(slaves=units, single=False)


async def main():
    logging.basicConfig(level=logging.WARNING)
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "tcp":
        print(f"serving tcp 127.0.0.1:{where}", flush=True)
        await StartAsyncTcpServer(
            context=context(True), address=("127.0.0.1", int(where)), request_tracer=trace
        )
    else:
        print(f"serving rtu {where}", flush=True)
        await StartAsyncSerialServer(
            context=context(False),
            port=where,
            request_tracer=trace,
            baudrate=19200,
            ignore_missing_slaves=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
