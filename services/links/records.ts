// Rows to protobuf messages. The one place that decides a link's status "as
// of now": a created link past its expires_at is expired even before the
// sweeper has recorded it.
import { create, fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import {
  type Checkout,
  CheckoutSchema,
  type Link,
  type LinkData,
  LinkDataSchema,
  LinkSchema,
  LinkType,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { statusFromName } from "../shared/names.js";
import type { LinkStatusValue, links } from "./schema.js";

export type LinkRow = typeof links.$inferSelect;


export function statusAt(row: Pick<LinkRow, "status" | "expiresAt">, now: Date): LinkStatusValue {
  return row.status === "created" && now.getTime() >= row.expiresAt.getTime() ? "expired" : row.status;
}

export function dataToJson(data: LinkData): Record<string, unknown> {
  return toJson(LinkDataSchema, data, { useProtoFieldName: true }) as Record<string, unknown>;
}

export function dataFromRow(row: Pick<LinkRow, "data">): LinkData {
  return fromJson(LinkDataSchema, row.data as JsonObject);
}

/** `data` saves decoding row.data again when the caller holds it already (a create). */
export function toLink(row: LinkRow, now: Date, checkoutBaseUrl: string, data: LinkData = dataFromRow(row)): Link {
  const status = statusAt(row, now);
  // A link changes when it expires; the sweeper records that moment as
  // updated_at, and a read before the sweep shows the same.
  const updatedAt = status === "expired" && row.status === "created" ? row.expiresAt : row.updatedAt;
  return create(LinkSchema, {
    id: row.id,
    url: `${checkoutBaseUrl}/link/${row.id}`,
    type: LinkType.PAYMENT,
    status: statusFromName(status),
    data,
    clientId: row.clientId,
    expiresAt: timestampFromDate(row.expiresAt),
    createdAt: timestampFromDate(row.createdAt),
    updatedAt: timestampFromDate(updatedAt),
    metadata: row.metadata,
  });
}

export function toCheckout(row: LinkRow, now: Date): Checkout {
  return create(CheckoutSchema, {
    linkId: row.id,
    status: statusFromName(statusAt(row, now)),
    data: dataFromRow(row),
    expiresAt: timestampFromDate(row.expiresAt),
  });
}
