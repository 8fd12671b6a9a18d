"""A platform team's Python client of the LinkService, on code generated from
proto/ (generate.sh): creates a link, reads it back, ends it, then tries to end
it again and reads why it was refused from the error's google.rpc.ErrorInfo;
prints each step as a JSON line.

    LINKS_TARGET  host:port of the LinkService (default 127.0.0.1:50051)
    CLIENT_ID     the merchant (default merchant-1)
    API_KEY       its secret key, with PAYLINK_AUTH=api-key
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402
from paylink.v1 import link_service_pb2 as pb  # noqa: E402
from paylink.v1 import link_service_pb2_grpc as rpc  # noqa: E402


def error_reason(err: grpc.RpcError) -> str:
    """The ErrorInfo reason (LINK_USED, LINK_EXPIRED, CARD_DECLINED, ...) in the error's grpc-status-details-bin."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return info.reason
    return ""


def main() -> None:
    metadata = [("client-id", os.environ.get("CLIENT_ID", "merchant-1"))]
    if os.environ.get("API_KEY"):
        metadata.append(("authorization", f"Bearer {os.environ['API_KEY']}"))
    with grpc.insecure_channel(os.environ.get("LINKS_TARGET", "127.0.0.1:50051")) as channel:
        links = rpc.LinkServiceStub(channel)
        created = links.CreateLink(
            pb.CreateLinkRequest(
                type=pb.LINK_TYPE_PAYMENT,
                expires_in=3600,
                # Integer minor units: 2550 is 25.50 USD.
                data=pb.LinkData(amount=pb.Amount(value=2550, currency="USD"), description="Order #1001 (Python client)"),
            ),
            metadata=metadata,
            timeout=10,
        )
        print(json.dumps({"created": created.link.id, "status": pb.LinkStatus.Name(created.link.status)}))
        read = links.GetLink(pb.GetLinkRequest(id=created.link.id), metadata=metadata, timeout=10)
        print(json.dumps({"read": read.link.id, "status": pb.LinkStatus.Name(read.link.status), "amount": str(read.link.data.amount.value)}))
        links.ExpireLink(pb.ExpireLinkRequest(id=created.link.id), metadata=metadata, timeout=10)
        try:
            links.ExpireLink(pb.ExpireLinkRequest(id=created.link.id), metadata=metadata, timeout=10)
        except grpc.RpcError as err:
            # The code says what kind of failure; the reason, which one.
            print(json.dumps({"expired_again": err.code().name, "reason": error_reason(err)}))


if __name__ == "__main__":
    main()
