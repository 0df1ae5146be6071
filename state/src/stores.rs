//! The one place a URL becomes a cloud object store, for checkpoints and
//! for the filesystem connector alike.
//!
//! | scheme | store | configured by |
//! |---|---|---|
//! | `s3://bucket/prefix` | S3 and S3-compatible servers | `AWS_*` (`AWS_ENDPOINT`, `AWS_ALLOW_HTTP=true` for MinIO or moto); region `us-east-1` unless set |
//! | `gs://bucket/prefix` | Google Cloud Storage | `GOOGLE_*` (`GOOGLE_SERVICE_ACCOUNT`, `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_BASE_URL` for an emulator) |
//! | `az://container/prefix` (also `abfs://`, `azure://`) | Azure Blob Storage | `AZURE_*` (`AZURE_STORAGE_ACCOUNT_NAME`, `…_KEY`, `AZURE_STORAGE_USE_EMULATOR=true` with `AZURITE_BLOB_STORAGE_URL` for Azurite) |
//!
//! Each builder reads its variables the way object_store documents
//! (`from_env`); nothing else is invented here.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::path::Path;
use weir_core::{Result, WeirError};

/// The schemes [`cloud_store`] opens, for error messages.
pub const CLOUD_SCHEMES: &str = "s3://, gs://, az://";

/// The store and path of a cloud URL, or `None` when `url` is not one
/// (a local path, `file://`, `memory://`). Errors name the URL.
pub fn cloud_store(url: &str) -> Option<Result<(Arc<dyn ObjectStore>, Path)>> {
    let (scheme, rest) = url.split_once("://")?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    let fail = |e: object_store::Error| WeirError::Config(format!("'{url}': {e}"));
    let store: Result<Arc<dyn ObjectStore>> = match scheme {
        "s3" => {
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            if std::env::var_os("AWS_DEFAULT_REGION").is_none()
                && std::env::var_os("AWS_REGION").is_none()
            {
                builder = builder.with_region("us-east-1");
            }
            builder.build().map(|s| Arc::new(s) as _).map_err(fail)
        }
        "gs" => object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map(|s| Arc::new(s) as _)
            .map_err(fail),
        "az" | "abfs" | "azure" => {
            // `abfs://container@account.dfs.core.windows.net/prefix`
            let (container, account) = match bucket.split_once('@') {
                Some((c, host)) => (c, host.split('.').next()),
                None => (bucket, None),
            };
            let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(container);
            if let Some(account) = account {
                builder = builder.with_account(account);
            }
            builder.build().map(|s| Arc::new(s) as _).map_err(fail)
        }
        _ => return None,
    };
    Some(store.map(|s| (s, Path::from(key))))
}
