//! Broker operations of a connector's start and cleanup over one connection
//! ([`Broker`]): the owner record, the passive probes, the declares and the deletes.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ErrorKind, ExchangeKind};

use super::config::Settings;
use super::ownership::{Claim, Marker, OwnerRecord};
use super::{RabbitError, owner_queue};

pub(crate) fn is_not_found(e: &lapin::Error) -> bool {
    matches!(e.kind(), ErrorKind::ProtocolError(p)
        if matches!(p.kind(), AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND)))
}

pub(crate) fn broker_error(step: impl Into<String>) -> impl FnOnce(lapin::Error) -> RabbitError {
    let step = step.into();
    move |e| RabbitError::Broker {
        step,
        detail: e.to_string(),
    }
}

/// One broker connection for a connector's start or cleanup. A failed passive declare
/// closes its channel, so every probe gets a channel of its own.
pub struct Broker {
    conn: Connection,
}

impl Broker {
    /// Connects.
    ///
    /// # Errors
    /// [`RabbitError::Connect`].
    pub async fn open(settings: &Settings) -> Result<Broker, RabbitError> {
        Ok(Broker {
            conn: settings.connect().await?,
        })
    }

    async fn channel(&self) -> Result<Channel, RabbitError> {
        self.conn
            .create_channel()
            .await
            .map_err(broker_error("opening a channel"))
    }

    /// Whether queue `name` exists (a passive declare).
    ///
    /// # Errors
    /// [`RabbitError::Broker`] on anything but NOT_FOUND.
    pub async fn queue_exists(&self, name: &str) -> Result<bool, RabbitError> {
        let ch = self.channel().await?;
        match ch
            .queue_declare(
                name.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await
        {
            Ok(_) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(broker_error(format!("checking queue {name:?}"))(e)),
        }
    }

    /// Whether exchange `name` exists (a passive declare).
    ///
    /// # Errors
    /// [`RabbitError::Broker`] on anything but NOT_FOUND.
    pub async fn exchange_exists(&self, name: &str) -> Result<bool, RabbitError> {
        let ch = self.channel().await?;
        let options = ExchangeDeclareOptions {
            passive: true,
            ..ExchangeDeclareOptions::default()
        };
        match ch
            .exchange_declare(
                name.into(),
                ExchangeKind::Direct,
                options,
                FieldTable::default(),
            )
            .await
        {
            Ok(()) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(true)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(broker_error(format!("checking exchange {name:?}"))(e)),
        }
    }

    /// Reads the owner record of `connector` without removing it (the message is taken
    /// unacknowledged and goes back when the channel closes).
    ///
    /// # Errors
    /// [`RabbitError::Broker`].
    pub async fn marker(&self, connector: &str) -> Result<Marker, RabbitError> {
        let name = owner_queue(connector);
        if !self.queue_exists(&name).await? {
            return Ok(Marker::Absent);
        }
        // A concurrent reader holds the message unacknowledged for a moment: look again
        // a few times before calling the queue unreadable.
        for attempt in 0..5u64 {
            let ch = self.channel().await?;
            let got = ch
                .basic_get(name.as_str().into(), BasicGetOptions { no_ack: false })
                .await;
            let found = match got {
                Ok(Some(m)) => Some(m.delivery.data.clone()),
                Ok(None) => None,
                Err(e) if is_not_found(&e) => return Ok(Marker::Absent),
                Err(e) => return Err(broker_error(format!("reading owner record {name:?}"))(e)),
            };
            // Closing the channel returns the unacknowledged message to the queue.
            let _ = ch.close(200, "done".into()).await;
            if let Some(data) = found {
                return Ok(serde_json::from_slice::<OwnerRecord>(&data)
                    .map(Marker::Owned)
                    .unwrap_or(Marker::Unreadable));
            }
            tokio::time::sleep(Duration::from_millis(50 * (attempt + 1))).await;
        }
        Ok(Marker::Unreadable)
    }

    /// Declares the owner-record queue and publishes `record` into it, confirmed.
    pub(crate) async fn write_marker(&self, record: &OwnerRecord) -> Result<(), RabbitError> {
        let name = owner_queue(&record.connector);
        let ch = self.channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(broker_error("enabling publisher confirms"))?;
        ch.queue_declare(
            name.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .map_err(broker_error(format!(
            "declaring owner record queue {name:?}"
        )))?;
        let body = serde_json::to_vec(record).unwrap_or_default();
        let confirm = ch
            .basic_publish(
                "".into(),
                name.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .map_err(broker_error("writing the owner record"))?
            .await
            .map_err(broker_error("writing the owner record"))?;
        let _ = ch.close(200, "done".into()).await;
        if confirm.is_ack() && confirm.take_message().is_none() {
            Ok(())
        } else {
            Err(RabbitError::Broker {
                step: "writing the owner record".to_owned(),
                detail: "the broker did not confirm it".to_owned(),
            })
        }
    }

    /// Declares (idempotently) what `record` says this connector owns, and the binding.
    pub(crate) async fn declare(
        &self,
        record: &OwnerRecord,
        settings: &Settings,
        claim: &Claim,
    ) -> Result<(), RabbitError> {
        let ch = self.channel().await?;
        if let Some(exchange) = &record.exchange {
            ch.exchange_declare(
                exchange.as_str().into(),
                settings.exchange_kind(),
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(broker_error(format!("declaring exchange {exchange:?}")))?;
        }
        if let Some(queue) = &record.queue {
            let mut args = FieldTable::default();
            args.insert(
                "x-wharf-connector".into(),
                AMQPValue::LongString(LongString::from(claim.connector.as_bytes().to_vec())),
            );
            args.insert(
                "x-wharf-incarnation".into(),
                AMQPValue::LongString(LongString::from(claim.incarnation.as_bytes().to_vec())),
            );
            ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::durable(), args)
                .await
                .map_err(broker_error(format!("declaring queue {queue:?}")))?;
        } else if !self.queue_exists(&settings.queue).await? {
            return Err(RabbitError::Refused(format!(
                "queue {:?} existed when this connector was created and was not declared by it, and it is gone now: declare it again, or delete and re-create the connector",
                settings.queue
            )));
        }
        if let Some(exchange) = &settings.exchange {
            ch.queue_bind(
                settings.queue.as_str().into(),
                exchange.as_str().into(),
                settings.routing_key.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(broker_error(format!(
                "binding queue {:?} to exchange {exchange:?}",
                settings.queue
            )))?;
        }
        let _ = ch.close(200, "done".into()).await;
        Ok(())
    }

    /// Deletes what `record` names, then the record itself. Each step tolerates an
    /// object already gone.
    pub(crate) async fn delete_owned(&self, record: &OwnerRecord) -> Result<(), RabbitError> {
        if let Some(queue) = &record.queue {
            self.delete_queue(queue).await?;
        }
        if let Some(exchange) = &record.exchange {
            let ch = self.channel().await?;
            match ch
                .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
                .await
            {
                Ok(()) => {
                    let _ = ch.close(200, "done".into()).await;
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(broker_error(format!("deleting exchange {exchange:?}"))(e)),
            }
        }
        // Last: while it exists, a retried cleanup still knows what is ours.
        self.delete_queue(&owner_queue(&record.connector)).await
    }

    async fn delete_queue(&self, name: &str) -> Result<(), RabbitError> {
        let ch = self.channel().await?;
        match ch
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await
        {
            Ok(_) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(broker_error(format!("deleting queue {name:?}"))(e)),
        }
    }

    /// Removes the binding of `queue` to `exchange` with `routing_key`; one already gone
    /// (or whose queue or exchange is gone) is fine.
    pub(crate) async fn unbind(
        &self,
        queue: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), RabbitError> {
        let ch = self.channel().await?;
        match ch
            .queue_unbind(
                queue.into(),
                exchange.into(),
                routing_key.into(),
                FieldTable::default(),
            )
            .await
        {
            Ok(()) => {
                let _ = ch.close(200, "done".into()).await;
                Ok(())
            }
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(broker_error(format!(
                "unbinding queue {queue:?} from exchange {exchange:?}"
            ))(e)),
        }
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = self.conn.close(200, "done".into()).await;
    }
}
