//! The catalog work of the PostgreSQL audit backend: the SQL that finds, provisions and
//! removes the audit table, its trigger function and triggers, and the owners record.

use super::*;

/// Doubles `'` and, when the text holds a backslash, uses the `E''` form with `\`
/// doubled too, so the literal is right whatever `standard_conforming_strings` says.
pub(super) fn pg_literal(text: &str) -> String {
    if text.contains('\\') {
        format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
    } else {
        format!("'{}'", text.replace('\'', "''"))
    }
}

/// One of our triggers as found in the catalog.
pub(super) struct FoundTrigger {
    table: TableName,
    name: String,
    /// Schema of the function it calls.
    function_schema: String,
}

/// Triggers on any table that call a function of ours, in any schema (the function
/// follows the audit table's schema, which a config update may change).
pub(super) async fn our_triggers(
    tx: &tokio_postgres::Transaction<'_>,
    names: &Names,
) -> Result<Vec<FoundTrigger>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT tn.nspname, c.relname, t.tgname, pn.nspname
               FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_namespace tn ON tn.oid = c.relnamespace
               JOIN pg_proc p ON p.oid = t.tgfoid
               JOIN pg_namespace pn ON pn.oid = p.pronamespace
              WHERE p.proname = $1 AND p.pronargs = 0
              ORDER BY 1, 2, 3",
            &[&names.function.name],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| FoundTrigger {
            table: TableName {
                schema: Some(r.get(0)),
                name: r.get(1),
            },
            name: r.get(2),
            function_schema: r.get(3),
        })
        .collect())
}

/// Our trigger functions, in any schema: `(function, audit table it wrote to as its
/// comment says)`.
pub(super) async fn our_functions(
    tx: &tokio_postgres::Transaction<'_>,
    names: &Names,
) -> Result<Vec<(TableName, Option<TableName>)>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT n.nspname, obj_description(p.oid, 'pg_proc')
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE p.proname = $1 AND p.pronargs = 0
              ORDER BY 1",
            &[&names.function.name],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let function = TableName {
                schema: Some(r.get(0)),
                name: names.function.name.clone(),
            };
            let comment: Option<String> = r.get(1);
            let audit = comment
                .and_then(|c| serde_json::from_str::<serde_json::Value>(&c).ok())
                .and_then(|v| {
                    Some(TableName {
                        schema: Some(v["audit_schema"].as_str()?.to_owned()),
                        name: v["audit_table"].as_str()?.to_owned(),
                    })
                });
            (function, audit)
        })
        .collect())
}

/// The comment put on the trigger function: which audit table it writes to, so that a
/// later start or cleanup finds a table left behind by a changed `audit.table`.
pub(super) fn function_comment(names: &Names) -> String {
    serde_json::json!({
        "wharf": "postgres-audit",
        "audit_schema": names.audit_table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA),
        "audit_table": names.audit_table.name,
    })
    .to_string()
}

/// What the catalog holds at `table`: absent, a table whose comment is no owner record,
/// or ours.
pub(super) async fn found(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TableName,
) -> Result<Found, tokio_postgres::Error> {
    let schema = table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
    let existing = tx
        .query_opt(
            "SELECT obj_description(c.oid, 'pg_class')
               FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
              WHERE ns.nspname = $1 AND c.relname = $2",
            &[&schema, &table.name],
        )
        .await?;
    Ok(match existing {
        None => Found::Absent,
        Some(row) => match row
            .get::<_, Option<String>>(0)
            .as_deref()
            .and_then(OwnerRecord::from_text)
        {
            Some(owner) => Found::Owned(owner),
            None => Found::Unowned,
        },
    })
}

pub(super) async fn write_owner(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TableName,
    owner: &OwnerRecord,
) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(&format!(
        "COMMENT ON TABLE {} IS {}",
        table.quoted(),
        pg_literal(&owner.to_text())
    ))
    .await
}

/// Drops `table` when `claim` owns it; leaves anything else in place.
pub(super) async fn drop_audit_table_if_ours(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TableName,
    claim: &Claim,
) -> Result<(), tokio_postgres::Error> {
    let found = found(tx, table).await?;
    match decide_cleanup(&found, claim) {
        CleanupStep::DropAll => {
            tx.batch_execute(&format!("DROP TABLE IF EXISTS {}", table.quoted()))
                .await?;
        }
        CleanupStep::DropCodeOnly | CleanupStep::Leave => {
            if found != Found::Absent {
                tracing::warn!(
                    table = %table,
                    "postgres-audit leaves the audit table in place: this connector incarnation does not own it"
                );
            }
        }
    }
    Ok(())
}

pub(super) async fn drop_triggers(
    tx: &tokio_postgres::Transaction<'_>,
    triggers: &[FoundTrigger],
) -> Result<(), tokio_postgres::Error> {
    for t in triggers {
        tx.batch_execute(&format!(
            "DROP TRIGGER IF EXISTS {} ON {}",
            quote_ident(&t.name),
            t.table.quoted()
        ))
        .await?;
    }
    Ok(())
}

/// Creates (idempotently) the audit table, the function and the triggers of `cfg`, and
/// drops our triggers on tables no longer listed. One transaction.
pub(super) async fn provision(
    client: &mut Client,
    cfg: &PgAuditConfig,
    claim: &Claim,
    adopt: Adopt,
) -> Result<i64, PgAuditError> {
    let n = &cfg.names;
    let tx = client
        .transaction()
        .await
        .map_err(provision_failed("beginning the transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&n.provision_lock])
        .await
        .map_err(provision_failed("taking the provisioning lock"))?;
    let start_after = claim_audit_table(&tx, n, claim, adopt).await?;
    let previous = install_function(&tx, n).await?;
    drop_stale(&tx, cfg, claim, previous).await?;
    install_triggers(&tx, cfg).await?;
    tx.commit()
        .await
        .map_err(provision_failed("committing the transaction"))?;
    Ok(start_after)
}

/// Maps a failed statement of [`provision`] to [`PgAuditError::ProvisionFailed`] naming
/// `step`.
pub(super) fn provision_failed(
    step: &'static str,
) -> impl Fn(tokio_postgres::Error) -> PgAuditError {
    move |e| PgAuditError::ProvisionFailed {
        step,
        detail: pg_detail(&e),
    }
}

/// Creates, reuses or adopts the audit table as [`decide_provision`] decides (never a
/// table somebody else made); returns the id the tasks start after.
pub(super) async fn claim_audit_table(
    tx: &tokio_postgres::Transaction<'_>,
    n: &Names,
    claim: &Claim,
    adopt: Adopt,
) -> Result<i64, PgAuditError> {
    // Ownership, decided in one place: never adopt a table somebody else made.
    let existing = found(tx, &n.audit_table)
        .await
        .map_err(provision_failed("reading the audit table's owner"))?;
    let audit = n.audit_table.quoted();
    let start_after = match decide_provision(&existing, claim, adopt) {
        ProvisionStep::Refuse(why) => return Err(why.into_error(&n.audit_table)),
        ProvisionStep::Create(owner) => {
            tx.batch_execute(&format!(
                "CREATE TABLE {audit} (
                     id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                     table_schema text NOT NULL,
                     table_name text NOT NULL,
                     operation text NOT NULL,
                     old_row jsonb,
                     new_row jsonb,
                     tx_time timestamptz NOT NULL DEFAULT now())"
            ))
            .await
            .map_err(provision_failed("creating the audit table"))?;
            write_owner(tx, &n.audit_table, &owner)
                .await
                .map_err(provision_failed("recording the owner"))?;
            owner.start_after
        }
        ProvisionStep::Reuse { start_after } => start_after,
        ProvisionStep::Adopt { from_end } => {
            let start_after: i64 = if from_end {
                tx.query_one(&format!("SELECT coalesce(max(id), 0) FROM {audit}"), &[])
                    .await
                    .map_err(provision_failed("reading the highest audit id"))?
                    .get(0)
            } else {
                0
            };
            write_owner(tx, &n.audit_table, &claim.record(start_after))
                .await
                .map_err(provision_failed("recording the owner"))?;
            tracing::info!(table = %n.audit_table, from_end, start_after, "postgres-audit adopted a kept audit table");
            start_after
        }
    };
    Ok(start_after)
}

/// Creates or replaces the trigger function; returns the trigger functions found before
/// (with their audit tables), so that what an earlier `audit.table` left can go.
pub(super) async fn install_function(
    tx: &tokio_postgres::Transaction<'_>,
    n: &Names,
) -> Result<Vec<(TableName, Option<TableName>)>, PgAuditError> {
    let audit = n.audit_table.quoted();
    let body = format!(
        "BEGIN
           PERFORM pg_catalog.pg_advisory_xact_lock({lock});
           INSERT INTO {audit} (table_schema, table_name, operation, old_row, new_row)
           VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP,
                   CASE WHEN TG_OP <> 'INSERT' THEN pg_catalog.to_jsonb(OLD) END,
                   CASE WHEN TG_OP <> 'DELETE' THEN pg_catalog.to_jsonb(NEW) END);
           RETURN NULL;
         END",
        lock = n.order_lock
    );
    let previous = our_functions(tx, n)
        .await
        .map_err(provision_failed("listing the trigger functions"))?;
    tx.batch_execute(&format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
           LANGUAGE plpgsql SET search_path = pg_catalog AS {body};
         COMMENT ON FUNCTION {function}() IS {comment};",
        function = n.function.quoted(),
        body = pg_literal(&body),
        comment = pg_literal(&function_comment(n))
    ))
    .await
    .map_err(provision_failed("creating the trigger function"))?;
    Ok(previous)
}

/// Drops our triggers on tables no longer watched (or of another name or function), and
/// the function and audit table of an earlier `audit.table` (`previous`), the table only
/// when `claim` owns it.
pub(super) async fn drop_stale(
    tx: &tokio_postgres::Transaction<'_>,
    cfg: &PgAuditConfig,
    claim: &Claim,
    previous: Vec<(TableName, Option<TableName>)>,
) -> Result<(), PgAuditError> {
    let n = &cfg.names;
    let present = our_triggers(tx, n)
        .await
        .map_err(provision_failed("listing the triggers"))?;
    let stale: Vec<FoundTrigger> = present
        .into_iter()
        .filter(|t| {
            !cfg.tables.contains(&t.table)
                || t.name != n.trigger
                || Some(t.function_schema.as_str()) != n.function.schema.as_deref()
        })
        .collect();
    drop_triggers(tx, &stale).await.map_err(provision_failed(
        "dropping triggers of tables no longer watched",
    ))?;
    // What an earlier audit.table left: its function (elsewhere) and its audit table.
    for (function, audit) in previous {
        if function != n.function {
            tx.batch_execute(&format!("DROP FUNCTION IF EXISTS {}()", function.quoted()))
                .await
                .map_err(provision_failed(
                    "dropping a trigger function of an earlier audit.table",
                ))?;
        }
        if let Some(audit) = audit.filter(|a| *a != n.audit_table) {
            drop_audit_table_if_ours(tx, &audit, claim)
                .await
                .map_err(provision_failed(
                    "dropping the audit table of an earlier audit.table",
                ))?;
        }
    }
    Ok(())
}

/// Creates the trigger on every watched table that lacks it.
///
/// # Errors
/// [`PgAuditError::TableMissing`] for a watched table that does not exist.
pub(super) async fn install_triggers(
    tx: &tokio_postgres::Transaction<'_>,
    cfg: &PgAuditConfig,
) -> Result<(), PgAuditError> {
    let n = &cfg.names;
    for table in &cfg.tables {
        let schema = table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
        let found = tx
            .query_opt(
                "SELECT c.oid,
                        EXISTS (SELECT 1 FROM pg_trigger t
                                 WHERE t.tgrelid = c.oid AND t.tgname = $3)
                   FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                  WHERE ns.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'",
                &[&schema, &table.name, &n.trigger],
            )
            .await
            .map_err(provision_failed("looking up a watched table"))?;
        let Some(row) = found else {
            return Err(PgAuditError::TableMissing {
                table: table.to_string(),
            });
        };
        let has_trigger: bool = row.get(1);
        if !has_trigger {
            tx.batch_execute(&format!(
                "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table}
                   FOR EACH ROW EXECUTE FUNCTION {function}()",
                trigger = quote_ident(&n.trigger),
                table = table.quoted(),
                function = n.function.quoted()
            ))
            .await
            .map_err(provision_failed("creating a trigger"))?;
        }
    }
    Ok(())
}

/// Drops our triggers on `only` (all tables when `None`), and with `everything` also the
/// function and the audit table (when `claim` owns it). One transaction; objects
/// already gone are skipped.
pub(super) async fn cleanup(
    client: &mut Client,
    names: &Names,
    claim: &Claim,
    only: Option<&[TableName]>,
    everything: bool,
) -> Result<(), PgAuditError> {
    let fail = |step: &'static str| {
        move |e: tokio_postgres::Error| PgAuditError::CleanupFailed {
            step,
            detail: pg_detail(&e),
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(fail("beginning the transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&names.provision_lock])
        .await
        .map_err(fail("taking the provisioning lock"))?;
    let existing = found(&tx, &names.audit_table)
        .await
        .map_err(fail("reading the audit table's owner"))?;
    match decide_cleanup(&existing, claim) {
        CleanupStep::Leave => {
            tracing::warn!(
                connector = %claim.connector,
                table = %names.audit_table,
                "postgres-audit cleanup drops nothing: another incarnation of this connector owns the audit table"
            );
            return Ok(());
        }
        CleanupStep::DropAll | CleanupStep::DropCodeOnly => {}
    }
    let triggers: Vec<FoundTrigger> = our_triggers(&tx, names)
        .await
        .map_err(fail("listing the triggers"))?
        .into_iter()
        .filter(|t| only.is_none_or(|tables| tables.contains(&t.table)))
        .collect();
    drop_triggers(&tx, &triggers)
        .await
        .map_err(fail("dropping triggers"))?;
    if everything {
        let functions = our_functions(&tx, names)
            .await
            .map_err(fail("listing the trigger functions"))?;
        let mut audit_tables = vec![names.audit_table.clone()];
        for (function, audit) in functions {
            tx.batch_execute(&format!("DROP FUNCTION IF EXISTS {}()", function.quoted()))
                .await
                .map_err(fail("dropping the trigger function"))?;
            if let Some(a) = audit.filter(|a| !audit_tables.contains(a)) {
                audit_tables.push(a);
            }
        }
        for table in &audit_tables {
            drop_audit_table_if_ours(&tx, table, claim)
                .await
                .map_err(fail("dropping the audit table"))?;
        }
    }
    tx.commit()
        .await
        .map_err(fail("committing the transaction"))?;
    Ok(())
}
