/* tests/support/fixture.h — the per-test database fixture of the
 * integration suites that drive store/ in-process: a fresh database cloned
 * from the template, a raw libpq connection for arranging and asserting,
 * and a store connection for the code under test. One test at a time uses
 * the globals (Check runs a suite's tests one after another). */
#ifndef OPSRUN_TEST_FIXTURE_H
#define OPSRUN_TEST_FIXTURE_H

#include "common/common.h"
#include "store/db.h"
#include "tests/support/harness.h"

#include <libpq-fe.h>

extern char *g_ci;      /* conninfo of this test's database */
extern PGconn *g_pg;    /* raw connection: arranging states, assertions */
extern struct db *g_db; /* the code under test's connection */
extern struct error g_err;
/* open_test_db's g_db sends unnamed statements (db.prepared_statements
 * false) while set; close_test_db clears it. For a loop test that runs the
 * same checks in both modes (_i 1: unnamed). */
extern bool g_unnamed;

/* Asserts that call (which passes &g_err) returns want. */
#define EXPECT(want, call)                                                                         \
    do {                                                                                           \
        enum status want_ = (want), got_;                                                          \
        memset(&g_err, 0, sizeof(g_err));                                                          \
        got_ = (call);                                                                             \
        ck_assert_msg(got_ == want_, "%s returned %s (%s), want %s", #call, status_name(got_),     \
                      g_err.message, status_name(want_));                                          \
    } while (0)
#define OK(call) EXPECT(ST_OK, call)

/* A store connection to ci (asserts success), with unnamed statements
 * while g_unnamed is set. */
struct db *connect_db(const char *ci);
/* Creates database `name` from the template and opens g_pg and g_db on it. */
void open_test_db(const char *name);
void close_test_db(void);
/* What differs between what tenants a and b hold (their runs, with every
 * column but the tenant, their events and their log chunks), one line per
 * row that only one of them has, or NULL when nothing does (free). For a
 * test that makes the same runs in two tenants two ways. A time is
 * compared as "=created_at" or "=completed_at" when it is the run's, and an
 * approval's expiry as its distance from when the run is due; any other
 * time as it is. */
char *tenants_differ(const char *a, const char *b);

#endif
