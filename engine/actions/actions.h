/* engine/actions/actions.h — each action's check of a run type's params,
 * for the configuration loader (server/cfg.c), which calls it once per run
 * type at start-up. An error names the key under path
 * ("run_types.etl.params.status.url"). Reentrant. */
#ifndef OPSRUN_ENGINE_ACTIONS_H
#define OPSRUN_ENGINE_ACTIONS_H

#include "common/common.h"

#include <jansson.h>

enum status action_rest_job_check(const json_t *params, const char *path, struct error *err) WUR;
enum status action_exec_check(const json_t *params, const char *path, struct error *err) WUR;
enum status action_http_check(const json_t *params, const char *path, struct error *err) WUR;
enum status action_soap_job_check(const json_t *params, const char *path, struct error *err) WUR;

#endif
