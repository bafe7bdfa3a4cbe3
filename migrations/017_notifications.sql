-- 017_notifications: what a run's transitions set off — notifications to
-- the configured notifiers and follow-up runs (docs/notifications.md).
--
-- Both are written by a trigger on runs, in the transaction of the
-- transition that causes them, whichever statement makes it (a worker's
-- finish, the poller, a cancel, an orphan rescue, a timeout): none is lost
-- when a process dies after the commit, and none exists for a transition
-- that rolled back. A delivery is sent afterwards by any replica, from the
-- notifications table (an outbox); a follow-up is a run like any other.
--
-- The rules come from the configuration: each replica writes its run types
-- into run_type_rules at start (store/rules.c). Replicas that share a
-- database are expected to share a configuration; when two differ, the one
-- that started last decides.
--
-- Only additions: a binary from before this migration keeps working beside
-- one after it (its runs carry reacts = false and set nothing off).

-- parent_id: the run whose end created this one as a follow-up (no
-- foreign key: retention deletes runs on their own schedule).
-- chain_depth: how many follow-ups lead to this run (0: a run submitted
-- any other way). reacts: the transitions of this run that set something
-- off under its type's rules when the run was created (or when they last
-- changed, for runs still active then), as the bits of opsrun_reaction_mask;
-- the trigger fires only for those, so a transition no rule names costs
-- nothing more than before.
ALTER TABLE runs ADD COLUMN parent_id text,
                 ADD COLUMN chain_depth integer NOT NULL DEFAULT 0,
                 ADD COLUMN reacts integer NOT NULL DEFAULT 0;

-- GET /runs?parent_id=, newest first: a run's follow-ups.
CREATE INDEX runs_parent ON runs (tenant, parent_id, created_at DESC, id DESC)
    WHERE parent_id IS NOT NULL;

-- The bit of each transition: started 1, retrying 2, approval_requested 4,
-- and the outcomes succeeded 8, partially_succeeded 16, failed 32,
-- cancelled 64, timed_out 128 ("*" is all five).
CREATE FUNCTION opsrun_event_bit(p_event text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_event WHEN 'started' THEN 1 WHEN 'retrying' THEN 2
                        WHEN 'approval_requested' THEN 4 WHEN 'succeeded' THEN 8
                        WHEN 'partially_succeeded' THEN 16 WHEN 'failed' THEN 32
                        WHEN 'cancelled' THEN 64 WHEN 'timed_out' THEN 128
                        WHEN '*' THEN 248 ELSE 0 END
$$;

-- The transitions a type's rules name, as bits.
CREATE FUNCTION opsrun_reaction_mask(p_notify jsonb, p_follow_ups jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(bit_or(opsrun_event_bit(e)), 0)
      FROM (SELECT jsonb_array_elements_text(x -> 'on') AS e
              FROM jsonb_array_elements(p_notify || p_follow_ups) AS x) a
$$;

-- One row per configured run type:
--   notify      [{"on": ["failed", ...], "to": "<notifier>"}]
--   follow_ups  [{"k": 1, "on": [...], "run_type": "...", "delay_s": 0, "data": {...}}]
-- max_attempts and timeout_s are what a follow-up of this type is created
-- with; max_chain_depth is queue.max_chain_depth.
CREATE TABLE run_type_rules (
    type            text        PRIMARY KEY,
    max_attempts    integer     NOT NULL CHECK (max_attempts >= 1),
    timeout_s       integer     NOT NULL CHECK (timeout_s >= 1),
    notify          jsonb       NOT NULL DEFAULT '[]',
    follow_ups      jsonb       NOT NULL DEFAULT '[]',
    max_chain_depth integer     NOT NULL DEFAULT 10,
    reacts          integer     GENERATED ALWAYS AS (opsrun_reaction_mask(notify, follow_ups))
                                STORED,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The outbox: one row per delivery still owed. delivery_id is the same on
-- every attempt (receivers deduplicate on it); run is the run object as the
-- transition left it. next_at: when the next attempt is due; a claimed
-- delivery's is pushed past the attempt's time limit (its lease), so no
-- other replica takes it meanwhile, and owner says whose attempt it is.
-- attempts counts the attempts claimed, and fences an attempt's result. A
-- delivered or abandoned row is deleted; what happened stays in the run's
-- events.
CREATE TABLE notifications (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id    uuid        NOT NULL DEFAULT gen_random_uuid(),
    tenant         text        NOT NULL,
    run_id         text        NOT NULL,
    run_created_at timestamptz NOT NULL,
    notifier       text        NOT NULL,
    event          text        NOT NULL,
    run            json        NOT NULL,
    attempts       integer     NOT NULL DEFAULT 0,
    next_at        timestamptz NOT NULL DEFAULT now(),
    owner          text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, run_id) REFERENCES runs (tenant, id) ON DELETE CASCADE
);
-- The due deliveries of one notifier, for its claims.
CREATE INDEX notifications_due ON notifications (notifier, next_at);
-- A run's deliveries to one notifier go out in order: one is claimed only
-- when none before it is still owed.
CREATE INDEX notifications_run ON notifications (tenant, run_id, notifier, id);

-- Events of two more types: "notification" (an attempt to deliver one)
-- and "follow_up" (a follow-up created, or why not). NOT VALID: the rows
-- already there hold the old types, and are not read again to prove it.
ALTER TABLE run_events DROP CONSTRAINT run_events_type_check;
ALTER TABLE run_events ADD CONSTRAINT run_events_type_check
    CHECK (type IN ('status', 'progress', 'notification', 'follow_up')) NOT VALID;

-- The value at a JSON pointer (RFC 6901) in doc, as common/jsonptr.c reads
-- it (an array index is digits without a leading zero); SQL NULL when
-- there is none ('null'::jsonb when the value is JSON null).
CREATE FUNCTION opsrun_pointer(doc jsonb, p text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    tok text;
BEGIN
    IF p = '' THEN
        RETURN doc;
    END IF;
    IF left(p, 1) <> '/' THEN
        RETURN NULL;
    END IF;
    FOREACH tok IN ARRAY regexp_split_to_array(substr(p, 2), '/') LOOP
        tok := replace(replace(tok, '~1', '/'), '~0', '~');
        IF jsonb_typeof(doc) = 'object' THEN
            doc := doc -> tok;
        ELSIF jsonb_typeof(doc) = 'array' AND tok ~ '^(0|[1-9][0-9]{0,8})$' THEN
            doc := doc -> tok::integer;
        ELSE
            RETURN NULL;
        END IF;
        IF doc IS NULL THEN
            RETURN NULL;
        END IF;
    END LOOP;
    RETURN doc;
END
$$;

-- A template string with {{run:/pointer}} placeholders over doc: a string
-- that is one placeholder and nothing else becomes the value there (an
-- object stays an object); otherwise each placeholder is spliced in as
-- text (a string as it is, anything else as JSON). missing: the first
-- pointer with no value (v is then NULL). The same rules as
-- common/template.c.
CREATE FUNCTION opsrun_expand_text(s text, doc jsonb, OUT v jsonb, OUT missing text)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    m text[];
    x jsonb;
    acc text := '';
    rest text := s;
BEGIN
    m := regexp_match(s, '^\{\{run:([^}]*)\}\}$');
    IF m IS NOT NULL THEN
        v := opsrun_pointer(doc, m[1]);
        IF v IS NULL THEN
            missing := m[1];
        END IF;
        RETURN;
    END IF;
    LOOP
        m := regexp_match(rest, '^(.*?)\{\{run:([^}]*)\}\}(.*)$');
        EXIT WHEN m IS NULL;
        x := opsrun_pointer(doc, m[2]);
        IF x IS NULL THEN
            missing := m[2];
            RETURN;
        END IF;
        acc := acc || m[1] || CASE WHEN jsonb_typeof(x) = 'string' THEN x #>> '{}' ELSE x::text END;
        rest := m[3];
    END LOOP;
    v := to_jsonb(acc || rest);
END
$$;

-- A JSON template (a follow-up's "data") over doc: every string in it
-- expanded as above.
CREATE FUNCTION opsrun_expand(t jsonb, doc jsonb, OUT v jsonb, OUT missing text)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k text;
    e jsonb;
    r record;
BEGIN
    CASE jsonb_typeof(t)
    WHEN 'object' THEN
        v := '{}';
        FOR k, e IN SELECT * FROM jsonb_each(t) LOOP
            r := opsrun_expand(e, doc);
            IF r.missing IS NOT NULL THEN
                v := NULL;
                missing := r.missing;
                RETURN;
            END IF;
            v := v || jsonb_build_object(k, r.v);
        END LOOP;
    WHEN 'array' THEN
        v := '[]';
        FOR e IN SELECT a.value FROM jsonb_array_elements(t) WITH ORDINALITY AS a ORDER BY a.ordinality LOOP
            r := opsrun_expand(e, doc);
            IF r.missing IS NOT NULL THEN
                v := NULL;
                missing := r.missing;
                RETURN;
            END IF;
            v := v || jsonb_build_array(r.v);
        END LOOP;
    WHEN 'string' THEN
        SELECT x.v, x.missing INTO v, missing FROM opsrun_expand_text(t #>> '{}', doc) x;
    ELSE
        v := t;
    END CASE;
END
$$;

-- The identity of a run as common/ids.c computes it: the hex SHA-256 of
-- each part followed by a NUL byte.
CREATE FUNCTION opsrun_identity(VARIADIC parts text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(string_agg(convert_to(p, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY o)),
                  'hex')
      FROM unnest(parts) WITH ORDINALITY AS u(p, o)
$$;

-- The deliveries that event (started, retrying, approval_requested, or an
-- outcome) of run r owes under rules (a run_type_rules.notify): one per
-- notifier named, "*" standing for every outcome. PL/pgSQL rather than SQL
-- here and below: a trigger calls these for every transition of a run
-- that reacts, and PL/pgSQL keeps the plans of its statements for the
-- session, where an SQL function would be planned again at every call.
CREATE FUNCTION opsrun_notify(r runs, p_event text, p_rules jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notifications (tenant, run_id, run_created_at, notifier, event, run)
    SELECT r.tenant, r.id, r.created_at, n.notifier, 'run.' || p_event, opsrun_run_json(r)
      FROM (SELECT DISTINCT x."to" AS notifier
              FROM jsonb_to_recordset(p_rules) AS x("on" jsonb, "to" text)
             WHERE x."on" ? p_event
                OR (x."on" ? '*' AND p_event IN ('succeeded', 'partially_succeeded', 'failed',
                                                 'cancelled', 'timed_out'))) n;
END
$$;

-- The same for a transition this file's trigger does not see (the approval
-- requested of migration 018 onwards): nothing unless r reacts.
CREATE FUNCTION opsrun_notify_event(r runs, p_event text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF r.reacts & opsrun_event_bit(p_event) <> 0 THEN
        PERFORM opsrun_notify(r, p_event, t.notify) FROM run_type_rules t WHERE t.type = r.type;
    END IF;
END
$$;

-- An event on run r of type follow_up.
CREATE FUNCTION opsrun_follow_up_event(r runs, p_message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                            run_created_at)
    VALUES (r.tenant, r.id, 'follow_up', r.status, r.outcome, r.progress, r.step, p_message,
            r.created_at);
END
$$;

-- The follow-ups of run r, which just ended, under its type's rules t:
-- those whose "on" holds its outcome, each with id "<r.id>.<k>", unless the
-- chain is already t.max_chain_depth deep, the type is unknown, the data
-- names a value r does not have, or the id is taken; every one created or
-- not is an event on r.
CREATE FUNCTION opsrun_follow_ups(r runs, t run_type_rules) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    f record;
    c run_type_rules;
    x record;
    v_doc jsonb;
    v_id text;
    v_at timestamptz;
    v_created timestamptz;
BEGIN
    FOR f IN SELECT * FROM jsonb_to_recordset(t.follow_ups)
                        AS y(k integer, "on" jsonb, run_type text, delay_s integer, data jsonb)
              WHERE y."on" ? r.outcome OR y."on" ? '*' ORDER BY y.k LOOP
        v_id := r.id || '.' || f.k;
        IF r.chain_depth >= t.max_chain_depth THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: this run is %s follow-ups down its chain, '
                'the most queue.max_chain_depth (%s) allows', f.k, f.run_type, r.chain_depth,
                t.max_chain_depth));
            CONTINUE;
        END IF;
        IF length(v_id) > 128 THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: its id would be longer than 128 characters',
                f.k, f.run_type));
            CONTINUE;
        END IF;
        SELECT * INTO c FROM run_type_rules WHERE type = f.run_type;
        IF NOT FOUND THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s not created: run type "%s" is not configured', f.k, f.run_type));
            CONTINUE;
        END IF;
        v_doc := coalesce(v_doc, opsrun_run_json(r)::jsonb);
        x := opsrun_expand(coalesce(f.data, '{}'), v_doc);
        IF x.missing IS NOT NULL THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: its data names {{run:%s}}, which this run '
                'does not have', f.k, f.run_type, x.missing));
            CONTINUE;
        END IF;
        v_at := coalesce(r.completed_at, now()) + make_interval(secs => coalesce(f.delay_s, 0));
        INSERT INTO runs (tenant, id, type, priority, run_at, max_attempts, timeout_s, input,
                          identity_hash, request_hash, initiator, parent_id, chain_depth, reacts)
        VALUES (r.tenant, v_id, f.run_type, r.priority, v_at, c.max_attempts, c.timeout_s, x.v,
                opsrun_identity(r.tenant, f.run_type, 'run_id', v_id),
                opsrun_identity(r.tenant, r.id, 'follow_up', f.k::text),
                r.initiator, r.id, r.chain_depth + 1, c.reacts)
        ON CONFLICT DO NOTHING
        RETURNING created_at INTO v_created;
        IF NOT FOUND THEN
            PERFORM opsrun_follow_up_event(r, format(
                'follow-up %s (%s) not created: a run with id %s exists', f.k, f.run_type, v_id));
            CONTINUE;
        END IF;
        INSERT INTO run_events (tenant, run_id, type, status, outcome, progress, step, message,
                                run_created_at)
        VALUES (r.tenant, v_id, 'status', 'queued', 'pending', 0, NULL,
                format('submitted as follow-up %s of %s', f.k, r.id), v_created);
        PERFORM opsrun_follow_up_event(r, format('follow-up %s (%s) created: %s%s', f.k,
            f.run_type, v_id, CASE WHEN coalesce(f.delay_s, 0) > 0
                                   THEN format(', due in %s s', f.delay_s) ELSE '' END));
    END LOOP;
END
$$;

-- What a change of status sets off: "started" when a run starts for the
-- first time (started_at was never set: a run released at shutdown and
-- claimed again starts only once), "retrying" when it goes back to the
-- queue after an attempt that counted, and its outcome when it ends (with
-- its follow-ups). The trigger's WHEN tells the same transitions apart, so
-- that the function runs only for one that the run's reacts names.
CREATE FUNCTION opsrun_react() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_event text;
    t run_type_rules;
BEGIN
    IF NEW.status = 'completed' THEN
        v_event := NEW.outcome;
    ELSIF NEW.status = 'running' AND OLD.started_at IS NULL THEN
        v_event := 'started';
    ELSIF NEW.status = 'queued' AND NEW.attempt = OLD.attempt AND NEW.attempt > 0 THEN
        v_event := 'retrying';
    ELSE
        RETURN NULL;
    END IF;
    SELECT * INTO t FROM run_type_rules WHERE type = NEW.type;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM opsrun_notify(NEW, v_event, t.notify);
    IF NEW.status = 'completed' AND t.follow_ups <> '[]' THEN
        PERFORM opsrun_follow_ups(NEW, t);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_react AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (NEW.reacts <> 0 AND NEW.status IS DISTINCT FROM OLD.status AND (
        (NEW.status = 'completed' AND NEW.reacts & opsrun_event_bit(NEW.outcome) <> 0)
        OR (NEW.status = 'running' AND OLD.started_at IS NULL AND NEW.reacts & 1 <> 0)
        OR (NEW.status = 'queued' AND NEW.attempt = OLD.attempt AND NEW.attempt > 0
            AND NEW.reacts & 2 <> 0)))
    EXECUTE FUNCTION opsrun_react();

-- The run object gains "parent_id" (after "poll"). The other members and
-- their order are those of migration 015.
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
            'name', r.schedule_name, 'slot', opsrun_ts(r.schedule_slot)) END)
$$;
