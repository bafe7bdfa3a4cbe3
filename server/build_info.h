/* server/build_info.h — what `opsrun version` reports besides the version:
 * the commit and the build date, recorded at build time by
 * scripts/build_info.cmake into a file linked into the program only (not
 * into any library): build_info_gen.c of the build tree. "unknown" when
 * the build could not tell. Constant strings; thread-safe. */
#ifndef OPSRUN_SERVER_BUILD_INFO_H
#define OPSRUN_SERVER_BUILD_INFO_H

extern const char opsrun_build_commit[]; /* short hash, maybe "-dirty" */
extern const char opsrun_build_date[];   /* YYYY-MM-DD, UTC */

#endif
