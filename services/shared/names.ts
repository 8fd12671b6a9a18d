// The API's enum values as REST, the database and error messages spell
// them: one table each way, for the service and the gateway alike. Maps, so
// a name such as "constructor" is simply unknown.
import { DeliveryStatus, LinkStatus, PaymentMethod } from "../../proto/gen/paylink/v1/link_service_pb.js";

export type StatusName = "created" | "used" | "expired";
export type MethodName = "card" | "bank_transfer";
export type DeliveryStatusName = "pending" | "delivered" | "failed" | "gone" | "no_webhook";

const STATUSES = new Map<string, LinkStatus>([
  ["created", LinkStatus.CREATED],
  ["used", LinkStatus.USED],
  ["expired", LinkStatus.EXPIRED],
]);
const METHODS = new Map<string, PaymentMethod>([
  ["card", PaymentMethod.CARD],
  ["bank_transfer", PaymentMethod.BANK_TRANSFER],
]);
const DELIVERY_STATUSES = new Map<DeliveryStatusName, DeliveryStatus>([
  ["pending", DeliveryStatus.PENDING],
  ["delivered", DeliveryStatus.DELIVERED],
  ["failed", DeliveryStatus.FAILED],
  ["gone", DeliveryStatus.GONE],
  ["no_webhook", DeliveryStatus.NO_WEBHOOK],
]);
const invert = <V>(table: Map<string, V>) => new Map([...table].map(([name, value]) => [value, name]));
const STATUS_NAMES = invert(STATUSES) as Map<LinkStatus, StatusName>;
const METHOD_NAMES = invert(METHODS) as Map<PaymentMethod, MethodName>;
const DELIVERY_STATUS_NAMES = invert(DELIVERY_STATUSES) as Map<DeliveryStatus, DeliveryStatusName>;

/** Every payment method, in the order a checkout offers them. */
export const PAYMENT_METHODS: readonly PaymentMethod[] = [...METHODS.values()];
/** The names each is spelled with, as REST's schemas list them. */
export const PAYMENT_METHOD_NAMES = [...METHODS.keys()] as MethodName[];
export const LINK_STATUS_NAMES = [...STATUSES.keys()] as StatusName[];

/** UNSPECIFIED for a name the API does not define. */
export const statusFromName = (name: string): LinkStatus => STATUSES.get(name) ?? LinkStatus.UNSPECIFIED;
export const statusName = (status: LinkStatus): StatusName | undefined => STATUS_NAMES.get(status);
export const methodFromName = (name: string): PaymentMethod => METHODS.get(name) ?? PaymentMethod.UNSPECIFIED;
export const methodName = (method: PaymentMethod): MethodName | undefined => METHOD_NAMES.get(method);
export const deliveryStatusFromName = (name: DeliveryStatusName): DeliveryStatus => DELIVERY_STATUSES.get(name)!;
export const deliveryStatusName = (status: DeliveryStatus): DeliveryStatusName | undefined => DELIVERY_STATUS_NAMES.get(status);
