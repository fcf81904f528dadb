/*
 * rsp-bench: command line and scenario dispatch.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* The machine, on stderr (stdout stays one JSON object per line): CPU model,
 * online CPUs, load average. Other work on the machine skews every figure. */
static void print_machine(const char *when)
{
    char model[128] = "?", load[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof model, "%s", c + 2);
                    model[strcspn(model, "\n")] = '\0';
                }
                break;
            }
        fclose(f);
    }
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fgets(load, sizeof load, f))
            load[strcspn(load, "\n")] = '\0';
        fclose(f);
    }
    fprintf(stderr, "# rsp-bench %s: %s, %ld CPUs online, loadavg %s\n", when, model,
            sysconf(_SC_NPROCESSORS_ONLN), load);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: rsp-bench [--quick] [--json] [--only SCENARIO] [--pin MODE]\n"
               "  scenarios: rtt ingest_remove step read zero_fork create ckpt_copy ckpt_lookup\n"
               "             ckpt_churn prefix_reuse metrics spec_accept\n"
               "             prefix_trace guard (default: all)\n"
               "  --quick  fewer repetitions (under 60 s on a 2-core machine)\n"
               "  --json   one JSON object per line instead of a table\n"
               "  --pin    none (default), split (client and owner each on a CPU of\n"
               "           their own) or shared (both on one CPU); JSON lines say \"pin\"\n");
}

int main(int argc, char **argv)
{
    bench_opts o = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            o.quick = true;
        else if (strcmp(argv[i], "--json") == 0)
            o.json = true;
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            o.only = argv[++i];
        else if (strcmp(argv[i], "--pin") == 0 && i + 1 < argc) {
            if (!bench_set_pin(argv[++i]))
                return 2;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "rsp-bench: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    static const struct {
        const char *name;
        void (*run)(const bench_opts *);
    } scenarios[] = {
        {"rtt", bench_rtt},
        {"ingest_remove", bench_ingest_remove},
        {"step", bench_step},
        {"read", bench_read},
        {"zero_fork", bench_zero_fork},
        {"spec_accept", bench_spec_accept},
        {"create", bench_create},
        {"ckpt_copy", bench_ckpt_copy},
        {"ckpt_lookup", bench_ckpt_lookup},
        {"ckpt_churn", bench_ckpt_churn},
        {"prefix_reuse", bench_prefix_reuse},
        {"metrics", bench_metrics},
        {"prefix_trace", bench_prefix_trace},
        {"guard", bench_guard},
    };
    print_machine("start");
    bool ran = false;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (o.only && strcmp(o.only, scenarios[i].name) != 0)
            continue;
        scenarios[i].run(&o);
        ran = true;
    }
    print_machine("end");
    if (!ran) {
        fprintf(stderr, "rsp-bench: unknown scenario '%s'\n", o.only);
        usage(stderr);
        return 2;
    }
    return 0;
}
