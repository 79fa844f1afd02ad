export * from './signature-builder';
export * from './signature-verifier';
export * from './structured-fields';
