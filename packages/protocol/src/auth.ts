import { Type, type Static } from 'typebox';
import { DateTime } from './common.js';
import { PlanName } from './account.js';

const email = Type.String({ minLength: 3, maxLength: 254, pattern: '^[^\\s@]+@[^\\s@]+$' });
const password = Type.String({ minLength: 8, maxLength: 1024 });

/** The body of `POST /api/v1/auth/login`; success sets the session cookie. */
export const LoginSchema = Type.Object(
  { email, password: Type.String({ minLength: 1, maxLength: 1024 }) },
  { title: 'Login', additionalProperties: false },
);
/** The body of `POST /api/v1/auth/signup`; success sets the session cookie. */
export const SignupSchema = Type.Object({ email, password }, { title: 'Signup', additionalProperties: false });
export type Login = Static<typeof LoginSchema>;
export type Signup = Static<typeof SignupSchema>;

/** An account without its balance: who is logged in, or an admin listing row. */
export const AccountSummarySchema = Type.Object(
  { id: Type.String(), email: Type.String(), plan: PlanName, admin: Type.Boolean(), createdAt: DateTime },
  { title: 'AccountSummary', additionalProperties: false },
);
export type AccountSummary = Static<typeof AccountSummarySchema>;
/** `{ account }`, the answer of login, signup and admin account operations. */
export const AccountReplySchema = Type.Object(
  { account: AccountSummarySchema },
  { title: 'AccountReply', additionalProperties: false },
);

/** Query of the one-time login link printed at first start. */
export const LoginLinkQuerySchema = Type.Object(
  { token: Type.String({ minLength: 1, maxLength: 200 }) },
  { additionalProperties: false },
);

/** The body of `POST /api/v1/admin/accounts`. */
export const AdminAccountCreateSchema = Type.Object(
  {
    email,
    password,
    plan: Type.Optional(PlanName),
    tokens: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: 1_000_000_000,
        description: "Initial grant; default the plan's signupTokens.",
      }),
    ),
    admin: Type.Optional(Type.Boolean()),
  },
  { title: 'AdminAccountCreate', additionalProperties: false },
);
export type AdminAccountCreate = Static<typeof AdminAccountCreateSchema>;
/** The body of `PATCH /api/v1/admin/accounts/{id}`. */
export const AdminAccountPatchSchema = Type.Object(
  { plan: PlanName },
  { title: 'AdminAccountPatch', additionalProperties: false },
);
/** The body of `POST /api/v1/admin/accounts/{id}/tokens`: a grant (or, negative, a charge). */
export const AdminGrantSchema = Type.Object(
  {
    tokens: Type.Integer({ minimum: -1_000_000_000, maximum: 1_000_000_000 }),
    reason: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
  },
  { title: 'AdminGrant', additionalProperties: false },
);
export const AdminGrantReplySchema = Type.Object(
  { balance: Type.Integer() },
  { title: 'AdminGrantReply', additionalProperties: false },
);
/** An admin listing row: the summary plus balance. */
export const AdminAccountListSchema = Type.Object(
  {
    accounts: Type.Array(
      Type.Object({ ...AccountSummarySchema.properties, balance: Type.Integer() }, { additionalProperties: false }),
    ),
  },
  { title: 'AdminAccountList', additionalProperties: false },
);
export const AccountParamsSchema = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64 }) },
  { additionalProperties: false },
);
