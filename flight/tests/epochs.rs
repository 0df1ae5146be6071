//! Leader epochs on control calls: a process that fences refuses calls
//! from a coordinator of an older epoch than one it has been called with,
//! over a real Flight endpoint on loopback.

use std::sync::Arc;

use bytes::Bytes;
use weir_flight::{ActionHandler, Credentials, EpochFence, FlightNode, call_action};

struct Fenced(EpochFence);

#[tonic::async_trait]
impl ActionHandler for Fenced {
    fn check_epoch(&self, epoch: Option<u64>) -> Result<(), tonic::Status> {
        self.0.admit(epoch)
    }

    async fn handle(&self, _kind: &str, _body: Bytes) -> Result<Bytes, tonic::Status> {
        Ok(Bytes::from_static(b"{}"))
    }

    fn actions(&self) -> Vec<(&'static str, &'static str)> {
        vec![("deploy", "a test action")]
    }
}

#[tokio::test]
async fn calls_from_an_older_leader_epoch_are_refused() {
    let node = FlightNode::new(
        None,
        false,
        None,
        Some(Arc::new(Fenced(EpochFence::default()))),
    );
    let (addr, _serving) = node
        .serve("127.0.0.1:0".parse().unwrap(), None, None)
        .await
        .unwrap();
    let addr = addr.to_string();
    let call = |epoch: Option<u64>| {
        let addr = addr.clone();
        async move {
            let credentials = Credentials {
                epoch,
                ..Credentials::default()
            };
            call_action(&addr, &credentials, "deploy", b"{}".to_vec()).await
        }
    };
    call(Some(2)).await.expect("the first leader seen");
    let refused = call(Some(1)).await.expect_err("an older leader");
    assert!(
        refused.to_string().contains("superseded by epoch 2"),
        "{refused}"
    );
    call(None)
        .await
        .expect("a coordinator without HA presents none");
    call(Some(3)).await.expect("a newer leader");
    assert!(call(Some(2)).await.is_err(), "epoch 2 is old now");
}
