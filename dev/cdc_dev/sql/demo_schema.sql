-- Demo schema captured by Debezium. Idempotent: safe to apply to a database that already has it.
-- REPLICA IDENTITY FULL gives full before-images in update and delete events.

CREATE TABLE IF NOT EXISTS public.customers (
    id          bigserial PRIMARY KEY,
    name        text        NOT NULL,
    email       text,
    balance     numeric(12, 2) NOT NULL DEFAULT 0,
    attrs       jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE public.customers REPLICA IDENTITY FULL;

CREATE TABLE IF NOT EXISTS public.order_lines (
    order_id    bigint      NOT NULL,
    line_no     integer     NOT NULL,
    sku         text        NOT NULL,
    quantity    integer     NOT NULL,
    unit_price  numeric(10, 4) NOT NULL,
    note        text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, line_no)
);
ALTER TABLE public.order_lines REPLICA IDENTITY FULL;

-- One row per reconciliation run, written after the snapshot; its event in Kafka proves that every
-- transaction the snapshot saw has been delivered.
CREATE TABLE IF NOT EXISTS public.cdc_watermark (
    id          bigserial PRIMARY KEY,
    run_id      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Debezium's signal table (the connector's signal.data.collection): a row of type execute-snapshot
-- starts an incremental snapshot of the tables it names (`cdc-tables add` writes one for a new table).
CREATE TABLE IF NOT EXISTS public.debezium_signal (
    id          varchar(64) PRIMARY KEY,
    type        varchar(32) NOT NULL,
    data        text
);
