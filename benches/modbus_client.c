/* A libmodbus client for scripts/bench.sh modbus: reads 125 holding registers
 * from address 0, back to back on one connection, for SECS seconds, and prints
 * "requests N seconds S errors E".
 *
 * Usage: modbus_client HOST PORT SECS   (built by scripts/bench.sh with cc -O2 -lmodbus)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <modbus.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s HOST PORT SECS\n", argv[0]);
        return 2;
    }
    modbus_t *ctx = modbus_new_tcp(argv[1], atoi(argv[2]));
    if (ctx == NULL || modbus_connect(ctx) == -1) {
        fprintf(stderr, "connect: %s\n", modbus_strerror(errno));
        return 1;
    }
    modbus_set_slave(ctx, 1);
    modbus_set_response_timeout(ctx, 1, 0);
    uint16_t regs[125];
    double secs = atof(argv[3]);
    long requests = 0, errors = 0;
    double start = now(), end = start + secs, t = start;
    while (t < end) {
        if (modbus_read_registers(ctx, 0, 125, regs) == 125) {
            requests++;
        } else {
            errors++;
        }
        t = now();
    }
    printf("requests %ld seconds %.3f errors %ld\n", requests, t - start, errors);
    modbus_close(ctx);
    modbus_free(ctx);
    return 0;
}
