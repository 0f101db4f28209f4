"""A Modbus device for the tests, served by pymodbus (pinned in scripts/test.sh).

Usage:
  modbus_device.py tcp PORT           Modbus TCP on 127.0.0.1:PORT, unit 1, and unit 2 with
                                      the sparse map below
  modbus_device.py rtu SERIAL_PATH    Modbus RTU on a serial device (a socat pty), unit 1 only;
                                      requests to other units get no answer at all

The register map is written out below with struct, independently of the connector's
decoder; tests/modbus.rs checks the decoded values against the same numbers.
Holding registers 0..99 exist (100 and up draw exception 2, illegal data address).

Unit 2 (TCP only) has a sparse map: holding registers 0-9, 100-103, 1000 and 5000-5009
exist, every other address draws exception 2; its other tables are empty.

Every request is logged as `request unit=U function=F` (stdout, the device's log), so a
test can check which function codes a client sent.
"""

import asyncio
import logging
import struct
import sys

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
    unit = ModbusSlaveContext(
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
