-- 022_concurrency: concurrency keys (a run type's "concurrency": at most
-- max_running runs of one tenant, group and key in running or cancelling,
-- across every replica) and claims that take the tenants in turn, with an
-- optional cap on the running runs of each tenant.
--
-- A run's key is evaluated once, when the run is inserted, by the trigger
-- runs_conc_fill from its type's rules (run_type_rules, written by every
-- replica at start) and kept in the row: conc_group, conc_key, conc_max,
-- conc_strategy. Every insert of a run goes through it, whichever statement
-- makes it (a submission, a batch, a retry, a bulk retry, a follow-up, a
-- schedule's slot), and a binary from before this migration too: each of
-- them copies its type's reacts from the rules into the run (migration
-- 017), and a type with concurrency now has bit 256 there, on which the
-- trigger fires. A run of any other type pays nothing for it (the trigger's
-- WHEN is false): measured, a trigger that looked the rules up for every
-- insert cost about 4 us a row, a third of a bare INSERT of a run.
--
-- Only the claim moves a run from queued to running (approvals, retries,
-- orphan rescue, follow-ups and schedules all make queued runs), and claims
-- are serialised by the claim lock (7260017001): the claim counts a key's
-- running and cancelling runs after taking it, as it counts max_running, so
-- a key is never over its max_running, not even briefly (a max_running
-- lowered while more runs run leaves them running to their end). A queued
-- run whose key is full when a claim reaches it, and every other due run
-- of that key, is marked held (conc_held) and leaves
-- the claim's index (runs_ready), so that claims do not read it again and
-- again; it is released (conc_held false) when a run of its key leaves
-- running or cancelling: the trigger runs_conc_freed leaves a marker in
-- conc_freed in the transaction that frees the key, and the next claim
-- releases, key by key, as many held runs as the key has room for, best
-- first (opsrun_conc_release). opsrun_conc_sweep does the same for every
-- key that has held runs, from the maintenance thread, so that no run
-- waits for ever even if a marker were lost.
--
-- The strategies that act at submission, each under the key's own lock
-- (pg_advisory_xact_lock(726001722, hashtext(tenant, group, key))):
--   cancel_newest       the new run completes at once, cancelled (error
--                       concurrency_limit), when the key has max_running
--                       runs queued, running or cancelling (runs_conc_fill)
--   keep_newest         the new run cancels the key's queued runs (error
--                       superseded) (runs_conc_insert)
--   cancel_in_progress  the new run cancels the key's queued and waiting
--                       runs and asks its running ones to cancel (error
--                       superseded); it starts once the key frees
-- A submission that joins an active run (same id or identity) does none of
-- this: deduplication wins. A run whose type has concurrency but whose key
-- cannot be made from its input (a follow-up or a schedule whose data lacks
-- the value; a submission is refused by the API instead) completes at once,
-- failed, error invalid_concurrency_key. Each of these writes an event that
-- says what happened.
--
-- Rolling upgrades: a binary from before this migration keeps working
-- beside one after it. Its claims (the 5- and 8-argument opsrun_claim) now
-- call this migration's claim without tenant caps; its inserts get keys
-- from the trigger; the triggers free keys and keep the strategies whatever
-- statement moves a run. Its figures of due runs (runs_next_due) count the
-- held runs as due runs left behind, which makes it claim again when one
-- of its workers frees, as a binary after this migration does on purpose
-- (a finish may free their key).

-- 1. The columns. NULL everywhere for a run of a type without concurrency.
ALTER TABLE runs ADD COLUMN conc_group    text,
                 ADD COLUMN conc_key      text,
                 ADD COLUMN conc_max      integer,
                 ADD COLUMN conc_strategy text,
                 ADD COLUMN conc_held     boolean NOT NULL DEFAULT false;
-- A run type's concurrency, as the configuration has it (NULL for none):
-- conc_parts is its key template compiled, a JSON array of parts
-- [["text", "x"], ["input", "/pointer"], ["tenant"]].
ALTER TABLE run_type_rules ADD COLUMN conc_group    text,
                           ADD COLUMN conc_parts    jsonb,
                           ADD COLUMN conc_max      integer,
                           ADD COLUMN conc_strategy text;
-- reacts (migration 017) gains bit 256, "created": the run's insert sets
-- off its type's concurrency. A generated column's expression cannot be
-- changed in place: the column is made again (the table has a row per run
-- type). The runs' copies are as they were: no type had concurrency.
ALTER TABLE run_type_rules DROP COLUMN reacts;
ALTER TABLE run_type_rules ADD COLUMN reacts integer GENERATED ALWAYS AS
    (opsrun_reaction_mask(notify, follow_ups)
     | CASE WHEN conc_group IS NOT NULL THEN 256 ELSE 0 END) STORED;

-- 2. The indexes. runs_claim (migration 001) goes: the claim walks each
-- ready tenant's part of runs_ready instead, and the claims of older
-- binaries call this migration's. runs_queued_at stays, for the queue's
-- age, the next run that comes due (a held run was due when it was held)
-- and an older binary's runs_next_due. A run of a type without
-- concurrency gets no index entry that it did not get before: a tenant's
-- running runs, for its cap, are counted on runs_held (migration 001),
-- which tenants have a due run is read from runs_ready, and every other
-- index here is partial on a key.
DROP INDEX runs_claim;
-- A tenant's runs in claim order, held runs left out.
CREATE INDEX runs_ready ON runs (tenant, priority DESC, run_at, created_at)
    WHERE status = 'queued' AND NOT conc_held;
-- A key's running and cancelling runs, for the claim's count of a key:
-- without it the planner reads all of runs_held (every running run) for
-- each key counted.
CREATE INDEX runs_key_held ON runs (tenant, conc_group, conc_key)
    WHERE status IN ('running', 'cancelling') AND conc_key IS NOT NULL;
-- A key's active runs, by status: cancel_newest's count, the runs a new
-- run supersedes. (A count of some statuses says status <> 'completed'
-- too, so that the planner sees that the index covers them.)
CREATE INDEX runs_conc_open ON runs (tenant, conc_group, conc_key, status)
    WHERE conc_key IS NOT NULL AND status <> 'completed';
-- A key's held runs in the order they are released.
CREATE INDEX runs_conc_held ON runs (tenant, conc_group, conc_key, priority DESC, run_at, created_at)
    WHERE conc_held AND status = 'queued';
-- A key's runs, newest first (GET /runs?concurrency_key=).
CREATE INDEX runs_conc_list ON runs (tenant, conc_key, created_at DESC, id DESC)
    WHERE conc_key IS NOT NULL;

-- 3. Keys.

-- The value at pointer p_ptr in p_input that a key may hold: a string, a
-- whole number within 64 bits (its text has no '.') or a boolean; NULL for
-- anything else or nothing. A reference token longer than 511 bytes finds
-- nothing, as in common/jsonptr.c.
CREATE FUNCTION opsrun_conc_value(p_input jsonb, p_ptr text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v jsonb;
BEGIN
    IF octet_length(p_ptr) > 511
       AND EXISTS (SELECT 1 FROM regexp_split_to_table(p_ptr, '/') AS t(tok)
                    WHERE octet_length(replace(replace(t.tok, '~1', '/'), '~0', '~')) > 511) THEN
        RETURN NULL;
    END IF;
    v := opsrun_pointer(p_input, p_ptr);
    CASE jsonb_typeof(v)
    WHEN 'string', 'boolean' THEN
        RETURN v;
    WHEN 'number' THEN
        -- jsonb keeps no exponent (1e3 is 1000 here, a real the C
        -- evaluator refuses); a whole number within 64 bits is what both
        -- take.
        RETURN CASE WHEN v::text !~ '^-?[0-9]{1,19}$' THEN NULL
                    WHEN (v::text)::numeric NOT BETWEEN -9223372036854775808
                                                    AND 9223372036854775807 THEN NULL
                    ELSE v END;
    ELSE
        RETURN NULL;
    END CASE;
END
$$;

-- The key of a run of tenant with input, from a type's compiled template
-- (conc_parts): each "text" part as it is, "tenant" the tenant ('' for
-- none), "input" the value at its JSON pointer in input: a string as it
-- is, an integer in decimal, true or false; NULL (no key) when a pointer
-- finds nothing or anything else, or when the key is longer than 512
-- bytes. The same rules as the C evaluator of the API, which refuses a
-- submission without a key (a number in jsonb keeps a '.' it was written
-- with, as jansson writes every real).
CREATE FUNCTION opsrun_conc_key(p_parts jsonb, p_tenant text, p_input jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    p jsonb;
    v jsonb;
    acc text := '';
BEGIN
    FOR p IN SELECT a.e FROM jsonb_array_elements(p_parts) WITH ORDINALITY AS a(e, o)
              ORDER BY a.o LOOP
        CASE p ->> 0
        WHEN 'text' THEN
            acc := acc || (p ->> 1);
        WHEN 'tenant' THEN
            acc := acc || coalesce(p_tenant, '');
        WHEN 'input' THEN
            v := opsrun_conc_value(p_input, p ->> 1);
            IF v IS NULL THEN
                RETURN NULL;
            END IF;
            acc := acc || CASE WHEN jsonb_typeof(v) = 'string' THEN v #>> '{}' ELSE v::text END;
        ELSE
            RETURN NULL;
        END CASE;
        IF octet_length(acc) > 512 THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN acc;
END
$$;

-- Why a run of a type with concurrency has no key: its first input part
-- that finds no usable value, or the length.
CREATE FUNCTION opsrun_conc_problem(p_parts jsonb, p_input jsonb) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    p jsonb;
    v jsonb;
BEGIN
    FOR p IN SELECT a.e FROM jsonb_array_elements(p_parts) WITH ORDINALITY AS a(e, o)
              WHERE a.e ->> 0 = 'input' ORDER BY a.o LOOP
        IF opsrun_conc_value(p_input, p ->> 1) IS NULL THEN
            v := opsrun_pointer(p_input, p ->> 1);
            IF v IS NULL THEN
                RETURN format('its input has no value at %s', p ->> 1);
            END IF;
            RETURN format('the value at %s of its input is %s, not a string, an integer or a '
                          'boolean', p ->> 1, CASE jsonb_typeof(v)
                              WHEN 'number' THEN 'a number with a fraction or an exponent'
                              WHEN 'object' THEN 'an object' WHEN 'array' THEN 'an array'
                              ELSE 'null' END);
        END IF;
    END LOOP;
    RETURN 'it would be longer than 512 bytes';
END
$$;

-- The lock of one key, for the strategies that act at submission.
CREATE FUNCTION opsrun_conc_lock(p_tenant text, p_group text, p_key text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(726001722, hashtext(p_tenant || chr(31) || p_group || chr(31) || p_key))
$$;

-- A new run r that an active run takes in (the same id, or the same
-- identity while active): the insert will do nothing, and deduplication
-- wins over every strategy.
CREATE FUNCTION opsrun_conc_joins(r runs) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM runs x WHERE x.id = r.id AND x.tenant = r.tenant)
        OR EXISTS (SELECT 1 FROM runs x WHERE x.tenant = r.tenant AND x.identity_hash = r.identity_hash
                                          AND x.status IN ('queued', 'running', 'waiting'))
$$;

-- 4. At insert: the key, and what cancel_newest and a missing key decide.
CREATE FUNCTION opsrun_conc_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    v_n bigint;
BEGIN
    SELECT r.conc_group, r.conc_parts, r.conc_max, r.conc_strategy INTO t
      FROM run_type_rules r WHERE r.type = NEW.type;
    IF t.conc_group IS NULL THEN
        RETURN NEW;
    END IF;
    NEW.conc_group := t.conc_group;
    NEW.conc_max := t.conc_max;
    NEW.conc_strategy := t.conc_strategy;
    NEW.conc_key := opsrun_conc_key(t.conc_parts, NEW.tenant, NEW.input);
    NEW.conc_held := false;
    IF NEW.status = 'completed' THEN
        RETURN NEW;
    END IF;
    IF NEW.conc_key IS NULL THEN
        IF opsrun_conc_joins(NEW) THEN
            RETURN NEW;
        END IF;
        NEW.status := 'completed';
        NEW.outcome := 'failed';
        NEW.completed_at := now();
        NEW.error := jsonb_build_object('code', 'invalid_concurrency_key', 'message',
            format('the concurrency key of run type "%s" could not be made: %s', NEW.type,
                   opsrun_conc_problem(t.conc_parts, NEW.input)));
        RETURN NEW;
    END IF;
    -- A run that waits for approval is judged when it is approved
    -- (runs_conc_requeued), not now: it may never be.
    IF NEW.conc_strategy = 'cancel_newest' AND NEW.status = 'queued' THEN
        PERFORM opsrun_conc_lock(NEW.tenant, NEW.conc_group, NEW.conc_key);
        IF opsrun_conc_joins(NEW) THEN
            RETURN NEW;
        END IF;
        SELECT count(*) INTO v_n FROM runs r
         WHERE r.tenant = NEW.tenant AND r.conc_group = NEW.conc_group AND r.conc_key = NEW.conc_key
           AND r.status IN ('queued', 'running', 'cancelling') AND r.status <> 'completed';
        IF v_n >= NEW.conc_max THEN
            NEW.status := 'completed';
            NEW.outcome := 'cancelled';
            NEW.completed_at := now();
            NEW.error := jsonb_build_object('code', 'concurrency_limit', 'message',
                format('concurrency key "%s" of group "%s" is full: %s queued or running, '
                       'max_running %s', NEW.conc_key, NEW.conc_group, v_n, NEW.conc_max));
        END IF;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_conc_fill BEFORE INSERT ON runs
    FOR EACH ROW WHEN (NEW.reacts & 256 <> 0) EXECUTE FUNCTION opsrun_conc_fill();

-- 5. After insert: the events of what runs_conc_fill decided (with the
-- notifications and follow-ups of the outcome, as any end of a run has),
-- and the runs a keep_newest or cancel_in_progress run supersedes.

-- The runs of new run n's key that it supersedes: the queued ones
-- (keep_newest), also the waiting and running ones (cancel_in_progress).
-- Queued and waiting runs end cancelled at once, with the hooks a cancel
-- owes (runs_cancel's SET_CANCEL_HOOKS); running ones are asked to cancel.
-- Of the runs one transaction inserts (same created_at) the one with the
-- greatest id is the newest; n does nothing once one of them superseded it.
-- A run that waits for approval is left alone when it is newer (it is
-- judged when it is approved, runs_conc_requeued) or being decided.
CREATE FUNCTION opsrun_conc_supersede(n runs) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_statuses text[] := CASE WHEN n.conc_strategy = 'keep_newest' THEN ARRAY['queued']
                              ELSE ARRAY['queued', 'waiting', 'running'] END;
BEGIN
    PERFORM opsrun_conc_lock(n.tenant, n.conc_group, n.conc_key);
    IF NOT EXISTS (SELECT 1 FROM runs x WHERE x.id = n.id AND x.tenant = n.tenant
                                          AND x.status <> 'completed') THEN
        RETURN;
    END IF;
    WITH act AS (
        SELECT r.tenant, r.id, r.status FROM runs r
         WHERE r.tenant = n.tenant AND r.conc_group = n.conc_group AND r.conc_key = n.conc_key
           AND r.status <> 'completed' AND r.status = ANY (v_statuses) AND r.id <> n.id
           AND NOT (r.created_at = n.created_at AND r.id > n.id)
           AND r.approval_state IS DISTINCT FROM 'pending'
         ORDER BY r.id FOR UPDATE
    ), pend AS (
        -- Runs awaiting approval that are older: one being decided (its
        -- row locked) is left to its decision, which judges it under this
        -- key's lock once n is committed (runs_conc_requeued). Waiting for
        -- its row here, while its decision waited for the key's lock, would
        -- deadlock.
        SELECT r.tenant, r.id, r.status FROM runs r
         WHERE n.conc_strategy = 'cancel_in_progress'
           AND r.tenant = n.tenant AND r.conc_group = n.conc_group AND r.conc_key = n.conc_key
           AND r.status = 'waiting' AND r.approval_state = 'pending' AND r.id <> n.id
           AND (r.created_at, r.id) < (n.created_at, n.id)
         ORDER BY r.id FOR UPDATE SKIP LOCKED
    ), cur AS (
        SELECT * FROM act UNION ALL SELECT * FROM pend
    ), upd AS (
        UPDATE runs r
           SET status = CASE WHEN cur.status = 'running' THEN 'cancelling' ELSE 'completed' END,
               outcome = CASE WHEN cur.status = 'running' THEN r.outcome ELSE 'cancelled' END,
               completed_at = CASE WHEN cur.status = 'running' THEN NULL ELSE now() END,
               hooks_at = CASE WHEN (cur.status = 'waiting'
                                     AND r.approval_state IS DISTINCT FROM 'pending')
                                 OR (cur.status = 'queued' AND r.cleanup_due)
                               THEN now() ELSE r.hooks_at END,
               hooks_attempts = CASE WHEN (cur.status = 'waiting'
                                           AND r.approval_state IS DISTINCT FROM 'pending')
                                       OR (cur.status = 'queued' AND r.cleanup_due)
                                     THEN 0 ELSE r.hooks_attempts END,
               next_poll_at = NULL,
               error = jsonb_build_object('code', 'superseded', 'message',
                                          format('superseded by run %s', n.id)),
               updated_at = now()
          FROM cur
         WHERE r.tenant = cur.tenant AND r.id = cur.id
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
           CASE WHEN u.status = 'cancelling' THEN 'cancel requested: superseded by '
                ELSE 'cancelled: superseded by ' END || n.id, u.created_at
      FROM upd u;
END
$$;

CREATE FUNCTION opsrun_conc_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t run_type_rules;
BEGIN
    IF NEW.status <> 'completed' THEN
        PERFORM opsrun_conc_supersede(NEW);
        RETURN NULL;
    END IF;
    IF NEW.error ->> 'code' NOT IN ('invalid_concurrency_key', 'concurrency_limit') THEN
        RETURN NULL;
    END IF;
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    VALUES (NEW.tenant, NEW.id, 'status', NEW.status, NEW.outcome, NEW.progress, NEW.step,
            CASE WHEN NEW.outcome = 'failed' THEN 'failed: ' ELSE 'cancelled: ' END
            || (NEW.error ->> 'message'), NEW.created_at);
    IF NEW.reacts & opsrun_event_bit(NEW.outcome) <> 0 THEN
        SELECT * INTO t FROM run_type_rules WHERE type = NEW.type;
        IF FOUND THEN
            PERFORM opsrun_notify(NEW, NEW.outcome, t.notify);
            IF t.follow_ups <> '[]' THEN
                PERFORM opsrun_follow_ups(NEW, t);
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_conc_insert AFTER INSERT ON runs
    FOR EACH ROW WHEN (NEW.conc_group IS NOT NULL
                       AND (NEW.status = 'completed'
                            OR (NEW.status = 'queued'
                                AND NEW.conc_strategy IN ('keep_newest', 'cancel_in_progress'))))
    EXECUTE FUNCTION opsrun_conc_inserted();

-- Run n, queued again, ends cancelled with error p_code and p_message: its
-- event says p_event, and its cleanup is due if it owes one (as a cancel
-- of a queued run).
CREATE FUNCTION opsrun_conc_cancel_queued(n runs, p_code text, p_message text, p_event text)
RETURNS void
LANGUAGE sql AS $$
    WITH upd AS (
        UPDATE runs r
           SET status = 'completed', outcome = 'cancelled', completed_at = now(),
               hooks_at = CASE WHEN r.cleanup_due THEN now() ELSE r.hooks_at END,
               hooks_attempts = CASE WHEN r.cleanup_due THEN 0 ELSE r.hooks_attempts END,
               next_poll_at = NULL,
               error = jsonb_build_object('code', p_code, 'message', p_message),
               updated_at = now()
         WHERE r.tenant = n.tenant AND r.id = n.id AND r.status = 'queued'
        RETURNING r.tenant, r.id, r.status, r.outcome, r.progress, r.step, r.created_at
    )
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step, p_event,
           u.created_at
      FROM upd u
$$;

-- A run of a key that becomes queued after its insert: approved, and
-- under keep_newest also a retry after a failed attempt, an orphan
-- rescued, a run a stopping worker handed back. The strategies judge it
-- as at a submission, with the runs that came after it:
--   keep_newest, cancel_in_progress  a newer active run of the key (one
--       that is not itself waiting for approval) supersedes it; if there is
--       none, it supersedes the key's older runs as a new run does (an
--       approved run did not when it was submitted);
--   cancel_newest  the run is cancelled if the key is full, as it would
--       have been at submission had it not waited.
-- A cancel_in_progress run that returns to the queue needs nothing here:
-- a newer run asked it to cancel (it ends cancelled), or finds it queued
-- (the newer run's insert waits for its row, then cancels it).
-- Lock order: this runs holding the run's row and then takes the key's
-- lock; an insert takes the key's lock and then the rows it supersedes,
-- passing over a run awaiting approval whose row is locked (see
-- opsrun_conc_supersede), and a keep_newest insert supersedes only queued
-- runs, which a returning run is not until it commits.
CREATE FUNCTION opsrun_conc_requeued() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_newer text;
    v_n bigint;
    v_msg text;
BEGIN
    PERFORM opsrun_conc_lock(NEW.tenant, NEW.conc_group, NEW.conc_key);
    IF NEW.conc_strategy = 'cancel_newest' THEN
        SELECT count(*) INTO v_n FROM runs r
         WHERE r.tenant = NEW.tenant AND r.conc_group = NEW.conc_group
           AND r.conc_key = NEW.conc_key AND r.status IN ('queued', 'running', 'cancelling')
           AND r.status <> 'completed' AND r.id <> NEW.id;
        IF v_n >= NEW.conc_max THEN
            v_msg := format('concurrency key "%s" of group "%s" is full: %s queued or running, '
                            'max_running %s', NEW.conc_key, NEW.conc_group, v_n, NEW.conc_max);
            PERFORM opsrun_conc_cancel_queued(NEW, 'concurrency_limit', v_msg,
                                              'cancelled: ' || v_msg);
        END IF;
        RETURN NULL;
    END IF;
    SELECT r.id INTO v_newer FROM runs r
     WHERE r.tenant = NEW.tenant AND r.conc_group = NEW.conc_group AND r.conc_key = NEW.conc_key
       AND r.status <> 'completed' AND r.id <> NEW.id
       AND (r.status IN ('queued', 'running', 'cancelling')
            OR (r.status = 'waiting' AND r.approval_state IS DISTINCT FROM 'pending'))
       AND (r.created_at, r.id) > (NEW.created_at, NEW.id)
     ORDER BY r.created_at DESC, r.id DESC LIMIT 1;
    IF v_newer IS NOT NULL THEN
        PERFORM opsrun_conc_cancel_queued(NEW, 'superseded', format('superseded by run %s', v_newer),
                                          'cancelled: superseded by ' || v_newer);
    ELSE
        PERFORM opsrun_conc_supersede(NEW);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_conc_requeued AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.status = 'queued' AND OLD.status <> 'queued'
                       AND NEW.conc_key IS NOT NULL
                       AND (NEW.conc_strategy = 'keep_newest'
                            OR (NEW.conc_strategy IN ('cancel_newest', 'cancel_in_progress')
                                AND OLD.approval_state = 'pending')))
    EXECUTE FUNCTION opsrun_conc_requeued();

-- 6. Freeing a key: the marker of a run of a key that left running or
-- cancelling, whichever statement moved it, read (and deleted) by the
-- next claim. Markers are not deduplicated: a key's marker is gone by the
-- next claim.
CREATE TABLE conc_freed (
    tenant     text NOT NULL,
    conc_group text NOT NULL,
    conc_key   text NOT NULL
);

CREATE FUNCTION opsrun_conc_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conc_freed (tenant, conc_group, conc_key)
    VALUES (OLD.tenant, OLD.conc_group, OLD.conc_key);
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_conc_freed AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.conc_key IS NOT NULL AND OLD.status IN ('running', 'cancelling')
                       AND NEW.status NOT IN ('running', 'cancelling'))
    EXECUTE FUNCTION opsrun_conc_freed();

-- Releases the held runs of the keys given (three arrays, one key at each
-- index), as many of each key as it has room for (its max_running, as its
-- best held run has it, less its running and cancelling runs), best first;
-- a held run that another transaction has locked (a cancel under way) is
-- passed over. Releasing more than a key can start is harmless (the next
-- claim holds them again), and this does not wait for the claim lock.
-- Returns how many were released.
CREATE FUNCTION opsrun_conc_unhold(p_tenants text[], p_groups text[], p_keys text[])
RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_n integer;
BEGIN
    WITH k AS (
        SELECT u.tenant, u.grp, u.ckey,
               (SELECT h.conc_max FROM runs h
                 WHERE h.tenant = u.tenant AND h.conc_group = u.grp AND h.conc_key = u.ckey
                   AND h.conc_held AND h.status = 'queued'
                 ORDER BY h.priority DESC, h.run_at, h.created_at LIMIT 1)
               - (SELECT count(*) FROM runs a
                   WHERE a.tenant = u.tenant AND a.conc_group = u.grp AND a.conc_key = u.ckey
                     AND a.status IN ('running', 'cancelling') AND a.status <> 'completed')
                   AS room
          FROM unnest(p_tenants, p_groups, p_keys) AS u(tenant, grp, ckey)
    ), x AS (
        SELECT h.tenant, h.id
          FROM k CROSS JOIN LATERAL (
               SELECT h.tenant, h.id FROM runs h
                WHERE h.tenant = k.tenant AND h.conc_group = k.grp AND h.conc_key = k.ckey
                  AND h.conc_held AND h.status = 'queued'
                ORDER BY h.priority DESC, h.run_at, h.created_at
                LIMIT k.room
                  FOR UPDATE OF h SKIP LOCKED) h
         WHERE k.room > 0
    )
    UPDATE runs r SET conc_held = false FROM x WHERE r.id = x.id AND r.tenant = x.tenant;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- The keys freed since the last claim: their held runs that may start now.
-- Called by the claim, under its lock.
CREATE FUNCTION opsrun_conc_release() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_t text[];
    v_g text[];
    v_k text[];
BEGIN
    WITH f AS (DELETE FROM conc_freed RETURNING tenant, conc_group, conc_key)
    SELECT array_agg(d.tenant), array_agg(d.conc_group), array_agg(d.conc_key)
      INTO v_t, v_g, v_k
      FROM (SELECT DISTINCT f.tenant, f.conc_group, f.conc_key FROM f) d;
    IF v_t IS NULL THEN
        RETURN 0;
    END IF;
    RETURN opsrun_conc_unhold(v_t, v_g, v_k);
END
$$;

-- Every key that has held runs, found by a skip scan of runs_conc_held (a
-- descent per key), released as far as it has room: what no marker asked
-- for, such as a marker deleted by hand. From the maintenance thread.
CREATE FUNCTION opsrun_conc_sweep() RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_t text[];
    v_g text[];
    v_k text[];
BEGIN
    WITH RECURSIVE k(tenant, grp, ckey) AS (
        (SELECT r.tenant, r.conc_group, r.conc_key FROM runs r
          WHERE r.conc_held AND r.status = 'queued'
          ORDER BY r.tenant, r.conc_group, r.conc_key LIMIT 1)
        UNION ALL
        SELECT x.tenant, x.conc_group, x.conc_key
          FROM k CROSS JOIN LATERAL (
               SELECT r.tenant, r.conc_group, r.conc_key FROM runs r
                WHERE r.conc_held AND r.status = 'queued'
                  AND (r.tenant, r.conc_group, r.conc_key) > (k.tenant, k.grp, k.ckey)
                ORDER BY r.tenant, r.conc_group, r.conc_key LIMIT 1) x
    )
    SELECT array_agg(k.tenant), array_agg(k.grp), array_agg(k.ckey) INTO v_t, v_g, v_k FROM k;
    IF v_t IS NULL THEN
        RETURN 0;
    END IF;
    RETURN opsrun_conc_unhold(v_t, v_g, v_k);
END
$$;

-- 7. The claim, with tenants in turn, tenant caps and keys.
--
-- The claim of migration 016 with three more arguments: p_tenants[i]'s
-- running runs are capped at p_tenant_caps[i], every other tenant's at
-- p_tenant_cap (NULL or 0: no cap). Under the claim lock, after releasing
-- the keys freed since the last claim, in rounds (at most eight):
--   1. the open types: those whose cap and rate limit have room;
--   2. the ready tenants: those with a due run that is not held
--      (opsrun_ready_tenants: a descent per tenant with a queued run),
--      less those at their cap and those an earlier round found empty,
--      rotated by opsrun_claim_turn so that each claim begins at another
--      tenant; only the first v_left of them (the window) can get a run.
--      When at most one tenant has queued runs, two descents of
--      runs_ready say so, and the first round is one statement (below);
--   3. the candidates: each tenant's best due runs of an open type, in
--      priority order, at most its share of the room left (and of its own
--      cap), locked (SKIP LOCKED), through runs_ready;
--   4. the decision: candidates are taken in turn (each tenant's best,
--      then each tenant's second, ...), within the room of their type's
--      cap, their rate limit and their key (its max_running less its
--      running and cancelling runs), at most the room left. A candidate
--      left over whose key is full is held;
--   5. the picks start (as in 016: status, attempt, deadline, event, rate
--      units), the held runs leave runs_ready.
-- Another round follows while room is left and either a round held or
-- left out a candidate or a tenant filled its share (the runs behind them
-- may be able to start), or tenants were left out of the window and some
-- in it had nothing to give (their due runs are all of closed types):
-- those leave the window to the others, and the window doubles. A round
-- that finds a key full holds every due run of that key. Priority orders
-- the runs within a
-- tenant; tenants are served in turn, so a tenant's backlog delays
-- another tenant's runs by at most one claim.
CREATE SEQUENCE opsrun_claim_turn;

-- Every tenant with a queued run that is not held, with its earliest
-- run_at: a skip scan of runs_ready that reads the first entry of each
-- (tenant, priority) pair, whose run_at is that pair's earliest (a
-- descent per pair; one per tenant that uses one priority). A tenant
-- whose runs all wait for a later time (run_at, a retry's delay) is here
-- with that time, and the claim leaves it out: only tenants with a due run
-- take a turn.
CREATE FUNCTION opsrun_ready_tenants() RETURNS TABLE (tenant text, run_at timestamptz)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
BEGIN
    -- PL/pgSQL keeps the statement's plan for the session (a SQL function
    -- called from a query would plan it again at every call).
    RETURN QUERY
    WITH RECURSIVE s(tenant, priority, run_at) AS (
        (SELECT r.tenant, r.priority, r.run_at FROM runs r
          WHERE r.status = 'queued' AND NOT r.conc_held
          ORDER BY r.tenant, r.priority DESC, r.run_at LIMIT 1)
        UNION ALL
        SELECT x.tenant, x.priority, x.run_at
          FROM s CROSS JOIN LATERAL (
               SELECT y.tenant, y.priority, y.run_at FROM (
                   (SELECT r.tenant, r.priority, r.run_at FROM runs r
                     WHERE r.status = 'queued' AND NOT r.conc_held
                       AND r.tenant = s.tenant AND r.priority < s.priority
                     ORDER BY r.priority DESC, r.run_at LIMIT 1)
                   UNION ALL
                   (SELECT r.tenant, r.priority, r.run_at FROM runs r
                     WHERE r.status = 'queued' AND NOT r.conc_held AND r.tenant > s.tenant
                     ORDER BY r.tenant, r.priority DESC, r.run_at LIMIT 1)) y
                LIMIT 1) x
    )
    SELECT s.tenant, min(s.run_at) FROM s GROUP BY s.tenant;
END
$$;

CREATE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                             p_types text[], p_caps integer[], p_rates text[],
                             p_rate_limits integer[], p_rate_per_ms bigint[],
                             p_tenants text[], p_tenant_caps integer[], p_tenant_cap integer)
RETURNS SETOF runs
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_sort = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_left integer;
    v_lim record;
    v_names text[] := '{}';
    v_rooms integer[] := '{}';
    v_capped boolean := coalesce(cardinality(array_remove(p_caps, NULL)), 0) > 0
                        OR coalesce(cardinality(array_remove(p_rates, NULL)), 0) > 0;
    v_tcapped boolean := coalesce(p_tenant_cap, 0) > 0
                         OR coalesce(cardinality(array_remove(p_tenant_caps, NULL)), 0) > 0;
    v_turn bigint;
    v_open text[];
    v_tenants text[];
    v_troom integer[];
    v_done text[] := '{}';
    v_n integer;
    v_s integer;
    v_share integer;
    d record;
    v_got integer;
    v_more boolean;
    v_width integer; -- how many tenants, in turn, a round looks at
    v_first text;
    v_one boolean;
BEGIN
    -- A key's and a cap's running runs are counted after the claim lock is
    -- taken: only a statement snapshot taken after it sees the claims
    -- committed before.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'opsrun_claim needs the read committed isolation level, not %',
            current_setting('transaction_isolation');
    END IF;
    PERFORM pg_advisory_xact_lock(7260017001);
    SELECT p_max_running - count(*) INTO v_left
      FROM runs WHERE status IN ('running', 'cancelling');
    v_left := least(v_left, p_limit);
    IF v_left <= 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM conc_freed) THEN
        PERFORM opsrun_conc_release();
    END IF;
    IF v_capped THEN
        FOR v_lim IN SELECT DISTINCT ON (t.rate) t.rate, t.lim, t.per
                       FROM unnest(p_rates, p_rate_limits, p_rate_per_ms) AS t(rate, lim, per)
                      WHERE t.rate IS NOT NULL ORDER BY t.rate LOOP
            v_names := v_names || v_lim.rate;
            v_rooms := v_rooms || (SELECT r.room FROM opsrun_rate_room(v_lim.rate, v_lim.lim,
                                                                       v_lim.per) r);
        END LOOP;
    END IF;
    FOR v_round IN 1 .. 8 LOOP
        -- 1. The open types.
        IF v_capped THEN
            SELECT array_agg(t.type) INTO v_open
              FROM unnest(p_types, p_caps, p_rates) AS t(type, cap, rate)
              LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = t.rate
             WHERE (t.cap IS NULL
                    OR t.cap > (SELECT count(*) FROM runs h
                                 WHERE h.type = t.type AND h.status IN ('running', 'cancelling')))
               AND (t.rate IS NULL OR l.room > 0);
        ELSE
            v_open := p_types;
        END IF;
        EXIT WHEN v_open IS NULL OR cardinality(v_open) = 0;
        -- 2. The ready tenants, with their room (NULL: no cap). When at
        -- most one tenant has queued runs (the usual case), two descents of
        -- runs_ready say so, and the first round's one statement below
        -- finds whether any is due. (Written as two ordered reads: a
        -- generic plan of "tenant > the first" read every queued run of
        -- runs_queued_at instead.)
        v_one := false;
        IF v_round = 1 AND NOT v_capped AND NOT v_tcapped THEN
            SELECT r.tenant INTO v_first FROM runs r
             WHERE r.status = 'queued' AND NOT r.conc_held ORDER BY r.tenant LIMIT 1;
            EXIT WHEN v_first IS NULL;
            v_one := NOT EXISTS (SELECT 1 FROM (SELECT r.tenant FROM runs r
                                                 WHERE r.status = 'queued' AND NOT r.conc_held
                                                   AND r.tenant > v_first
                                                 ORDER BY r.tenant LIMIT 1) x);
        END IF;
        IF v_tcapped THEN
            WITH c AS (
                SELECT s.tenant,
                       coalesce((SELECT u.cap FROM unnest(p_tenants, p_tenant_caps) AS u(tenant, cap)
                                  WHERE u.tenant = s.tenant LIMIT 1), p_tenant_cap) AS cap
                  FROM opsrun_ready_tenants() s
                 WHERE s.run_at <= now() AND s.tenant <> ALL (v_done)
            ), h AS MATERIALIZED (
                -- Every tenant's running runs at once, on runs_held: at
                -- most queue.max_running entries.
                SELECT a.tenant, count(*) AS n FROM runs a
                 WHERE a.status IN ('running', 'cancelling') GROUP BY a.tenant
            ), r AS (
                SELECT c.tenant,
                       CASE WHEN c.cap > 0 THEN c.cap - coalesce((SELECT h.n FROM h
                                                                   WHERE h.tenant = c.tenant), 0)
                       END AS room
                  FROM c
            )
            SELECT array_agg(r.tenant ORDER BY r.tenant), array_agg(r.room ORDER BY r.tenant)
              INTO v_tenants, v_troom
              FROM r WHERE r.room IS NULL OR r.room > 0;
        ELSIF v_one THEN
            v_tenants := ARRAY[v_first];
            v_troom := ARRAY[NULL::integer];
        ELSE
            SELECT array_agg(s.tenant ORDER BY s.tenant), array_agg(NULL::integer)
              INTO v_tenants, v_troom
              FROM opsrun_ready_tenants() s
             WHERE s.run_at <= now() AND s.tenant <> ALL (v_done);
        END IF;
        EXIT WHEN v_tenants IS NULL;
        v_n := cardinality(v_tenants);
        -- One tenant, no caps or limits (the default): the claim of 016 on
        -- that tenant, unless a run with a key is among its candidates
        -- (then the rounds below do it). It took every candidate there
        -- was, up to the room left.
        IF v_round = 1 AND v_n = 1 AND NOT v_capped AND NOT v_tcapped THEN
            RETURN QUERY
            WITH cand AS MATERIALIZED (
                SELECT r.tenant, r.id, r.conc_key
                  FROM runs r
                 WHERE r.tenant = v_tenants[1] AND r.status = 'queued' AND NOT r.conc_held
                   AND r.run_at <= now() AND r.type = ANY (v_open)
                 ORDER BY r.priority DESC, r.run_at, r.created_at
                 LIMIT v_left
                   FOR UPDATE OF r SKIP LOCKED
            ), upd AS (
                UPDATE runs r
                   SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
                       heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
                       deadline_at = now() + make_interval(secs => r.timeout_s),
                       progress = 0, step = NULL, error = NULL, updated_at = now()
                  FROM cand c
                 WHERE r.id = c.id AND r.tenant = c.tenant
                   AND NOT EXISTS (SELECT 1 FROM cand k WHERE k.conc_key IS NOT NULL)
                RETURNING r.*
            ), ev AS (
                INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                        message, run_created_at)
                SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                       format('attempt %s started by %s', u.attempt, p_worker), u.created_at
                  FROM upd u
            )
            SELECT * FROM upd;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            EXIT WHEN v_got > 0;
        END IF;
        IF v_n > 1 THEN
            v_turn := coalesce(v_turn, nextval('opsrun_claim_turn'));
            v_s := (v_turn % v_n)::integer;
            v_tenants := v_tenants[v_s + 1 : v_n] || v_tenants[1 : v_s];
            v_troom := v_troom[v_s + 1 : v_n] || v_troom[1 : v_s];
        END IF;
        v_share := (v_left + v_n - 1) / v_n;
        v_width := greatest(coalesce(v_width, 0), v_left);
        -- 3. and 4. The candidates and what becomes of each: ok, within
        -- the room of its type's cap, its rate limit and its key (each
        -- counted over the candidates before it, in turn; only for a
        -- type with a cap or limit, a run with a key); picked, the first
        -- v_left that are ok; held, left over and its key full.
        WITH t AS (
            SELECT u.tenant, u.turn, least(v_share, coalesce(u.room, v_share)) AS lim
              FROM unnest(v_tenants, v_troom) WITH ORDINALITY AS u(tenant, room, turn)
             WHERE u.turn <= v_width
        ), cand AS MATERIALIZED (
            SELECT x.*, t.turn, t.lim,
                   row_number() OVER (PARTITION BY x.tenant
                                      ORDER BY x.priority DESC, x.run_at, x.created_at) AS trn,
                   CASE WHEN x.conc_key IS NOT NULL THEN
                       x.conc_max - (SELECT count(*) FROM runs a
                                      WHERE a.tenant = x.tenant AND a.conc_group = x.conc_group
                                        AND a.conc_key = x.conc_key
                                        AND a.status IN ('running', 'cancelling')
                                        AND a.status <> 'completed')
                   END AS key_room
              FROM t CROSS JOIN LATERAL (
                   SELECT r.tenant, r.id, r.type, r.priority, r.run_at, r.created_at,
                          r.conc_group, r.conc_key, r.conc_max
                     FROM runs r
                    WHERE r.tenant = t.tenant AND r.status = 'queued' AND NOT r.conc_held
                      AND r.run_at <= now() AND r.type = ANY (v_open)
                    ORDER BY r.priority DESC, r.run_at, r.created_at
                    LIMIT t.lim
                      FOR UPDATE OF r SKIP LOCKED) x
        ), kinds AS MATERIALIZED (
            SELECT k.type, k.rate, l.room AS rate_room,
                   CASE WHEN k.cap IS NOT NULL THEN
                       k.cap - (SELECT count(*) FROM runs h
                                 WHERE h.type = k.type AND h.status IN ('running', 'cancelling'))
                   END AS room
              FROM unnest(p_types, p_caps, p_rates) AS k(type, cap, rate)
              LEFT JOIN unnest(v_names, v_rooms) AS l(name, room) ON l.name = k.rate
             WHERE v_capped AND k.type = ANY (v_open)
        ), judged AS MATERIALIZED (
            SELECT c.tenant, c.id, c.trn, c.turn, c.conc_group, c.conc_key, c.key_room,
                   sum(CASE WHEN c.ok THEN 1 ELSE 0 END)
                       OVER (ORDER BY c.trn, c.turn ROWS UNBOUNDED PRECEDING) AS okn, c.ok
              FROM (SELECT c.*,
                           (NOT v_capped OR EXISTS (
                               SELECT 1 FROM kinds k WHERE k.type = c.type
                                  AND (k.room IS NULL
                                       OR k.room >= (SELECT count(*) FROM cand q
                                                      WHERE q.type = c.type
                                                        AND (q.trn, q.turn) <= (c.trn, c.turn)))
                                  AND (k.rate IS NULL
                                       OR k.rate_room >= (SELECT count(*) FROM cand q
                                                           JOIN kinds qk ON qk.type = q.type
                                                          WHERE qk.rate = k.rate
                                                            AND (q.trn, q.turn)
                                                                <= (c.trn, c.turn)))))
                           AND (c.key_room IS NULL
                                OR c.key_room >= (SELECT count(*) FROM cand q
                                                   WHERE q.tenant = c.tenant
                                                     AND q.conc_group = c.conc_group
                                                     AND q.conc_key = c.conc_key
                                                     AND q.trn <= c.trn)) AS ok
                      FROM cand c) c
        ), decided AS MATERIALIZED (
            SELECT j.tenant, j.id, j.trn, j.turn,
                   CASE WHEN j.ok AND j.okn <= v_left THEN 'p'
                        WHEN j.key_room IS NOT NULL
                             AND j.key_room <= (SELECT count(*) FROM judged q
                                                 WHERE q.tenant = j.tenant
                                                   AND q.conc_group = j.conc_group
                                                   AND q.conc_key = j.conc_key
                                                   AND q.ok AND q.okn <= v_left) THEN 'h'
                        ELSE 's' END AS d
              FROM judged j
        )
        SELECT array_agg(x.tenant ORDER BY x.trn, x.turn) FILTER (WHERE x.d = 'p') AS p_tenants,
               array_agg(x.id ORDER BY x.trn, x.turn) FILTER (WHERE x.d = 'p') AS p_ids,
               array_agg(x.tenant) FILTER (WHERE x.d = 'h') AS h_tenants,
               array_agg(x.id) FILTER (WHERE x.d = 'h') AS h_ids,
               count(*) FILTER (WHERE x.d = 's') AS skipped,
               (SELECT array_agg(t.tenant) FROM t
                 WHERE (SELECT count(*) FROM cand c WHERE c.tenant = t.tenant) < t.lim) AS done,
               EXISTS (SELECT 1 FROM t
                        WHERE t.lim = v_share
                          AND (SELECT count(*) FROM cand c WHERE c.tenant = t.tenant) = t.lim)
                   AS filled
          INTO d
          FROM decided x;
        -- 5. Hold, then start.
        IF d.h_ids IS NOT NULL THEN
            -- Every due run of a key found full is held, not only the
            -- candidates: a backlog on one key must not fill the next
            -- claims' candidates while another key's run waits behind it.
            WITH k AS (
                SELECT DISTINCT r.tenant, r.conc_group, r.conc_key
                  FROM unnest(d.h_tenants, d.h_ids) AS h(tenant, id)
                  JOIN runs r ON r.id = h.id AND r.tenant = h.tenant
            ), x AS (
                SELECT r.tenant, r.id FROM k JOIN runs r
                    ON r.tenant = k.tenant AND r.conc_group = k.conc_group
                   AND r.conc_key = k.conc_key
                 WHERE r.status = 'queued' AND r.status <> 'completed' AND NOT r.conc_held
                   AND r.run_at <= now()
                   FOR UPDATE OF r SKIP LOCKED
            )
            UPDATE runs r SET conc_held = true FROM x WHERE r.id = x.id AND r.tenant = x.tenant;
        END IF;
        v_got := 0;
        IF d.p_ids IS NOT NULL THEN
            RETURN QUERY
            WITH upd AS (
                UPDATE runs r
                   SET status = 'running', worker_id = p_worker, attempt = r.attempt + 1,
                       heartbeat_at = now(), started_at = coalesce(r.started_at, now()),
                       deadline_at = now() + make_interval(secs => r.timeout_s),
                       progress = 0, step = NULL, error = NULL, updated_at = now()
                  FROM unnest(d.p_tenants, d.p_ids) AS p(tenant, id)
                 WHERE r.id = p.id AND r.tenant = p.tenant
                RETURNING r.*
            ), ev AS (
                INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step,
                                        message, run_created_at)
                SELECT u.tenant, u.id, 'status', u.status, u.outcome, u.progress, u.step,
                       format('attempt %s started by %s', u.attempt, p_worker), u.created_at
                  FROM upd u
            ), used AS (
                INSERT INTO rate_limit_slices AS s (name, until, units)
                SELECT k.rate, opsrun_rate_slice_end(now(), max(k.per)), count(*)
                  FROM upd u JOIN unnest(p_types, p_rates, p_rate_per_ms) AS k(type, rate, per)
                    ON k.type = u.type
                 WHERE k.rate IS NOT NULL
                 GROUP BY k.rate
                ON CONFLICT (name, until) DO UPDATE SET units = s.units + EXCLUDED.units
            )
            SELECT * FROM upd;
            GET DIAGNOSTICS v_got = ROW_COUNT;
            IF cardinality(v_names) > 0 THEN
                SELECT array_agg(l.room - (SELECT count(*)
                                             FROM unnest(d.p_tenants, d.p_ids) AS p(tenant, id)
                                             JOIN runs r ON r.id = p.id AND r.tenant = p.tenant
                                             JOIN unnest(p_types, p_rates) AS k(type, rate)
                                               ON k.type = r.type
                                            WHERE k.rate = l.name)::integer ORDER BY l.o)
                  INTO v_rooms
                  FROM unnest(v_names, v_rooms) WITH ORDINALITY AS l(name, room, o);
            END IF;
        END IF;
        v_more := v_n > v_width; -- tenants were left out of this round's window
        v_left := v_left - v_got;
        v_done := v_done || d.done;
        EXIT WHEN v_left <= 0;
        -- Tenants of the window that had no more to give (their due runs
        -- are of closed types, or were taken) leave the next rounds' window
        -- to the tenants left out, and the window doubles: eight rounds
        -- look at up to 255 times the room left.
        IF v_more AND d.done IS NOT NULL THEN
            v_width := least(v_width * 2, 1000000);
            CONTINUE;
        END IF;
        EXIT WHEN (v_got = 0 AND d.h_ids IS NULL)
               OR (d.h_ids IS NULL AND d.skipped = 0 AND NOT d.filled);
    END LOOP;
END
$$;

-- The claims of migrations 013 and 016, for a binary from before this
-- migration: this migration's claim, without tenant caps.
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[])
RETURNS SETOF runs
LANGUAGE sql AS $$
    SELECT * FROM opsrun_claim(p_worker, p_limit, p_max_running, p_types, p_caps, NULL::text[],
                               NULL::integer[], NULL::bigint[], NULL::text[], NULL::integer[],
                               NULL::integer)
$$;
CREATE OR REPLACE FUNCTION opsrun_claim(p_worker text, p_limit integer, p_max_running integer,
                                        p_types text[], p_caps integer[], p_rates text[],
                                        p_rate_limits integer[], p_rate_per_ms bigint[])
RETURNS SETOF runs
LANGUAGE sql AS $$
    SELECT * FROM opsrun_claim(p_worker, p_limit, p_max_running, p_types, p_caps, p_rates,
                               p_rate_limits, p_rate_per_ms, NULL::text[], NULL::integer[],
                               NULL::integer)
$$;

-- 8. The run object gains "concurrency" (after "approval"): {"group",
-- "key", "max_running", "strategy", "held"}, null for a run of a type
-- without concurrency; "held" is true while the run is queued and held
-- back by its key. The other members and their order are those of
-- migration 018.
CREATE OR REPLACE FUNCTION opsrun_run_json(r runs) RETURNS json
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT json_build_object(
        'id', r.id, 'tenant', r.tenant, 'initiator', r.initiator, 'type', r.type,
        'status', r.status, 'outcome', r.outcome, 'priority', r.priority,
        'attempt', r.attempt, 'max_attempts', r.max_attempts, 'progress', r.progress,
        'step', r.step, 'input', r.input, 'result', r.result, 'error', r.error,
        'summary_counts', r.summary_counts, 'failure_summary', r.failure_summary,
        'context', r.context, 'external_id', r.external_id, 'worker_id', r.worker_id,
        'created_at', opsrun_ts(r.created_at), 'run_at', opsrun_ts(r.run_at),
        'started_at', opsrun_ts(r.started_at), 'completed_at', opsrun_ts(r.completed_at),
        'updated_at', opsrun_ts(r.updated_at), 'retry_of', r.retry_of,
        'poll', CASE WHEN r.poll_started_at IS NOT NULL THEN json_build_object(
            'checks', r.poll_count, 'max_checks', r.poll_max_checks,
            'max_duration_s', r.poll_max_duration_s,
            'next_check_at', CASE WHEN r.status = 'waiting' AND r.poll_owner IS NULL
                                  THEN opsrun_ts(r.next_poll_at) END,
            'waiting_since', opsrun_ts(r.poll_started_at),
            'give_up_at', opsrun_ts(r.poll_started_at
                                    + make_interval(secs => r.poll_max_duration_s))) END,
        'parent_id', r.parent_id,
        'schedule', CASE WHEN r.schedule_name IS NOT NULL THEN json_build_object(
            'name', r.schedule_name, 'slot', opsrun_ts(r.schedule_slot)) END,
        'approval', CASE WHEN r.approval_state IS NOT NULL THEN json_build_object(
            'state', CASE WHEN r.approval_state = 'pending' AND r.status <> 'waiting'
                          THEN 'cancelled' ELSE r.approval_state END,
            'requested_at', opsrun_ts(r.created_at),
            'expires_at', opsrun_ts(r.approval_expires_at),
            'on_timeout', r.approval_on_timeout,
            'decided_by', r.approval_decided_by,
            'decided_at', opsrun_ts(CASE WHEN r.approval_state = 'pending'
                                         AND r.status <> 'waiting' THEN r.completed_at
                                         ELSE r.approval_decided_at END),
            'comment', r.approval_comment) END,
        'concurrency', CASE WHEN r.conc_group IS NOT NULL THEN json_build_object(
            'group', r.conc_group, 'key', r.conc_key, 'max_running', r.conc_max,
            'strategy', r.conc_strategy, 'held', r.conc_held AND r.status = 'queued') END)
$$;
