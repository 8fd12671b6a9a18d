"""A platform team's Python client of the LinkService, on code generated from
proto/ (generate.sh): creates a link, reads it back, prints both as JSON lines.

    LINKS_TARGET  host:port of the LinkService (default 127.0.0.1:50051)
    CLIENT_ID     the merchant (default merchant-1)
    API_KEY       its secret key, with PAYLINK_AUTH=api-key
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from paylink.v1 import link_service_pb2 as pb  # noqa: E402
from paylink.v1 import link_service_pb2_grpc as rpc  # noqa: E402


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


if __name__ == "__main__":
    main()
