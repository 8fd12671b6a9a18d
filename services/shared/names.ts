// The API's enum values as REST, the database and error messages spell
// them: one table each way, for the service and the gateway alike.
import { LinkStatus, PaymentMethod } from "../../proto/gen/paylink/v1/link_service_pb.js";

export type StatusName = "created" | "used" | "expired";
export type MethodName = "card" | "bank_transfer";

const STATUSES: Record<StatusName, LinkStatus> = {
  created: LinkStatus.CREATED,
  used: LinkStatus.USED,
  expired: LinkStatus.EXPIRED,
};
const METHODS: Record<MethodName, PaymentMethod> = {
  card: PaymentMethod.CARD,
  bank_transfer: PaymentMethod.BANK_TRANSFER,
};

const invert = <K extends string, V extends number>(table: Record<K, V>) =>
  new Map(Object.entries(table).map(([name, value]) => [value as V, name as K]));
const STATUS_NAMES = invert(STATUSES);
const METHOD_NAMES = invert(METHODS);

/** UNSPECIFIED for a name the API does not define. */
export const statusFromName = (name: string): LinkStatus => STATUSES[name as StatusName] ?? LinkStatus.UNSPECIFIED;
export const statusName = (status: LinkStatus): StatusName | undefined => STATUS_NAMES.get(status);
export const methodFromName = (name: string): PaymentMethod => METHODS[name as MethodName] ?? PaymentMethod.UNSPECIFIED;
export const methodName = (method: PaymentMethod): MethodName | undefined => METHOD_NAMES.get(method);
